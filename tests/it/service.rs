//! The agent as a service: reloading its configuration (`Agent::reload`, which SIGHUP calls)
//! and the service manager's notify protocol (`NOTIFY_SOCKET`), against the in-process fake
//! CRI server, plus the output formats of a dry run's plan. The process tests synchronise on
//! the notify messages themselves, never on a guessed sleep.

use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use imagekeeper::agent::{Agent, ConfigSource};
use imagekeeper::config::FlagValues;
use imagekeeper::cri::FakeRuntime;
use imagekeeper::gc::GcOrder;
use imagekeeper::model::UnixNanos;

use crate::support::agent::{AgentChild, AgentFixture, next_notify};
use crate::support::{CapturedLog, http_get};

/// An in-process agent on `fake` (database and admin socket in `dir`) whose configuration is
/// `file` under the flags `extra` sets besides those: a reload reads the file again under them.
async fn agent_with_config_file(
    fake: &FakeRuntime,
    dir: &Path,
    file: &Path,
    extra: FlagValues,
) -> Agent {
    let source = ConfigSource {
        file: Some(file.to_path_buf()),
        flags: FlagValues {
            db: Some(dir.join("records.redb")),
            container_runtime_endpoint: Some(fake.endpoint()),
            admin_socket: Some(dir.join("admin.sock")),
            ..extra
        },
    };
    let config = source.resolve().expect("valid start configuration");
    let clock = Arc::new(imagekeeper::clock::ManualClock::new(UnixNanos::from_secs(
        1_800_000_000,
    )));
    Agent::start(config, clock)
        .await
        .expect("agent starts")
        .with_config_source(source)
}

/// In-process, through the function SIGHUP calls: a valid file swaps the GC settings it
/// changed while a flag given at start still wins over the file; an invalid file (a value the
/// kubelet refuses, an unknown field, not TOML, gone) keeps the running configuration, logs
/// exactly one error naming the field or file, and counts a failure.
#[tokio::test]
async fn reload_swaps_the_files_gc_settings_flags_still_win_and_an_invalid_file_changes_nothing() {
    // The reload's error must be logged exactly once.
    let (log, _log) = CapturedLog::install();

    let AgentFixture { fake, dir, .. } = AgentFixture::builder()
        .image("sha256:aaa", "registry.example/a:1", 1000)
        .image_fs_used(1000)
        .start()
        .await;
    let file = dir.path().join("imagekeeper.toml");
    std::fs::write(
        &file,
        "imageGCHighThresholdPercent = 90\nimageGCLowThresholdPercent = 70\nimageMaximumGCAge = \"1h\"\n",
    )
    .expect("write config");
    let agent = agent_with_config_file(
        &fake,
        dir.path(),
        &file,
        FlagValues {
            // Given on the command line: wins over the file at start and at every reload.
            image_gc_high_threshold: Some(100),
            ..FlagValues::default()
        },
    )
    .await;
    let policy = |agent: &Agent| agent.gc_manager().config().policy;
    assert_eq!(policy(&agent).high_threshold_percent, 100);
    assert_eq!(policy(&agent).max_age, Duration::from_secs(3600));
    log.take();

    std::fs::write(
        &file,
        "imageGCHighThresholdPercent = 95\nimageGCLowThresholdPercent = 60\nimageMaximumGCAge = \"2h\"\npinnedImages = [\"registry.example/a:*\"]\n",
    )
    .expect("rewrite config");
    let report = agent.reload().await.expect("a valid file reloads");
    assert_eq!(
        report.changed,
        [
            "imageGCLowThresholdPercent",
            "imageMaximumGCAge",
            "pinnedImages"
        ],
        "the high threshold is the flag's, whatever the file says"
    );
    assert!(report.needs_restart.is_empty());
    let gc = agent.gc_manager().config();
    assert_eq!(gc.policy.high_threshold_percent, 100);
    assert_eq!(gc.policy.low_threshold_percent, 60);
    assert_eq!(gc.policy.max_age, Duration::from_secs(7200));
    assert_eq!(gc.pins.patterns(), ["registry.example/a:*"]);
    assert_eq!(
        agent.config().gc,
        gc,
        "the agent's view follows the manager's"
    );
    let lines = log.take();
    assert!(
        lines
            .iter()
            .any(|l| l.contains("INFO") && l.contains("Reloaded configuration")),
        "{lines:?}"
    );

    let running = agent.gc_manager().config();
    let unknown = dir.path().join("missing.toml");
    let cases: [(&str, &str); 3] = [
        (
            "imageGCLowThresholdPercent = 100\n",
            "imageGCLowThresholdPercent in ",
        ),
        (
            "imageGCLowThresholdPercent = 50\nimageGCHighThreshold = 3\n",
            "unknown field `imageGCHighThreshold`",
        ),
        (
            "imageMaximumGCAge = \"ten days\"\n",
            "imageMaximumGCAge in ",
        ),
    ];
    for (text, names) in cases {
        std::fs::write(&file, text).expect("write bad config");
        let err = agent.reload().await.expect_err(text).to_string();
        assert!(err.contains(names), "{err:?} should name {names:?}");
        assert_eq!(agent.gc_manager().config(), running, "{text}: kept");
        let errors: Vec<String> = log
            .take()
            .into_iter()
            .filter(|l| l.contains("ERROR"))
            .collect();
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(errors[0].contains(names), "{errors:?}");
    }
    std::fs::rename(&file, &unknown).expect("move the file away");
    let err = agent
        .reload()
        .await
        .expect_err("a missing file")
        .to_string();
    assert!(err.contains(&file.display().to_string()), "{err}");
    assert_eq!(agent.gc_manager().config(), running);

    let metrics = agent.render_metrics();
    assert!(
        metrics.contains("\nimagekeeper_config_reloads_total{result=\"success\"} 1\n"),
        "{metrics}"
    );
    assert!(
        metrics.contains("\nimagekeeper_config_reloads_total{result=\"failure\"} 4\n"),
        "{metrics}"
    );
}

/// An agent process on `fake` with its database, admin socket and config file
/// (`imagekeeper.toml`) in `dir`, killed on drop if still alive.
fn start_service(
    fake: &FakeRuntime,
    dir: &Path,
    notify_socket: &str,
    extra: &[&str],
) -> AgentChild {
    let config = dir.join("imagekeeper.toml");
    let mut args = vec!["--config", config.to_str().expect("utf8")];
    args.extend_from_slice(extra);
    AgentChild::spawn(
        &fake.endpoint(),
        &dir.join("records.redb"),
        &dir.join("admin.sock"),
        notify_socket,
        &args,
    )
}

/// `Type=notify` as systemd runs it: the messages arrive in order — READY=1 once the first
/// detect is done (the database then holds the runtime's image), RELOADING=1 with
/// MONOTONIC_USEC and READY=1 around each real SIGHUP (the metric counts a success, then a
/// failure that kept the running threshold), STOPPING=1 at SIGTERM, then exit 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notify_socket_gets_ready_after_the_first_detect_reloading_on_sighup_and_stopping() {
    let AgentFixture { fake, dir, .. } = AgentFixture::builder()
        .image("sha256:aaa", "registry.example/a:1", 1000)
        .image_fs_used(1000)
        .start()
        .await;
    let config = dir.path().join("imagekeeper.toml");
    std::fs::write(
        &config,
        "imageGCHighThresholdPercent = 100\nimageGCLowThresholdPercent = 70\n",
    )
    .expect("write config");
    let notify_path = dir.path().join("notify.sock");
    let manager = UnixDatagram::bind(&notify_path).expect("bind the notify socket");
    // Port 0: the agent binds a port the kernel chooses and logs it (a port picked here and
    // passed on could be taken by anyone in between).
    let mut service = start_service(
        &fake,
        dir.path(),
        notify_path.to_str().expect("utf8"),
        &["--metrics-address", "127.0.0.1:0"],
    );
    let metrics = service.metrics_address().await;

    let ready = next_notify(&manager);
    assert!(ready.starts_with("READY=1\n"), "{ready:?}");
    assert!(ready.contains("STATUS="), "{ready:?}");
    // READY=1 means the first detect committed: the record is there.
    let body = http_get(&metrics, "/metrics");
    assert!(body.contains("\nimagekeeper_image_records 1\n"), "{body}");

    std::fs::write(
        &config,
        "imageGCHighThresholdPercent = 100\nimageGCLowThresholdPercent = 60\n",
    )
    .expect("rewrite config");
    service.signal(libc::SIGHUP);
    let reloading = next_notify(&manager);
    let usec: u64 = reloading
        .strip_prefix("RELOADING=1\nMONOTONIC_USEC=")
        .unwrap_or_else(|| panic!("{reloading:?}"))
        .parse()
        .expect("microseconds");
    assert!(usec > 0);
    let done = next_notify(&manager);
    assert_eq!(done, "READY=1\nSTATUS=Running: configuration reloaded");
    let body = http_get(&metrics, "/metrics");
    assert!(
        body.contains("\nimagekeeper_config_reloads_total{result=\"success\"} 1\n"),
        "{body}"
    );

    std::fs::write(&config, "imageGCLowThresholdPercent = 100\n").expect("bad config");
    service.signal(libc::SIGHUP);
    assert!(next_notify(&manager).starts_with("RELOADING=1\n"));
    let done = next_notify(&manager);
    assert!(
        done.starts_with("READY=1\nSTATUS=Running: reload failed, configuration kept: imageGCLowThresholdPercent in "),
        "{done:?}"
    );
    let body = http_get(&metrics, "/metrics");
    assert!(
        body.contains("\nimagekeeper_config_reloads_total{result=\"failure\"} 1\n"),
        "{body}"
    );

    service.signal(libc::SIGTERM);
    assert_eq!(next_notify(&manager), "STOPPING=1");
    assert_eq!(service.wait().code(), Some(0));
}

/// `--config-watch-period`: the file rewritten (as a ConfigMap volume's update swaps it) is
/// reloaded without a signal, framed for the service manager as a SIGHUP's reload is; a
/// second check with the file unchanged reloads nothing. The notify messages are the signal
/// waited on; the 1 s period bounds how soon they come.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watched_config_file_that_changes_is_reloaded_without_a_signal() {
    let AgentFixture { fake, dir, .. } = AgentFixture::builder()
        .image("sha256:aaa", "registry.example/a:1", 1000)
        .image_fs_used(1000)
        .start()
        .await;
    let config = dir.path().join("imagekeeper.toml");
    std::fs::write(
        &config,
        "imageGCHighThresholdPercent = 100
",
    )
    .expect("write config");
    let notify_path = dir.path().join("notify.sock");
    let manager = UnixDatagram::bind(&notify_path).expect("bind the notify socket");
    let mut service = start_service(
        &fake,
        dir.path(),
        notify_path.to_str().expect("utf8"),
        &[
            "--metrics-address",
            "127.0.0.1:0",
            "--config-watch-period",
            "1s",
        ],
    );
    let metrics = service.metrics_address().await;
    assert!(next_notify(&manager).starts_with("READY=1\n"));
    // A new file in place of the old one (another inode, another size), as a ConfigMap's
    // `..data` swap gives.
    let next = dir.path().join("imagekeeper.toml.new");
    std::fs::write(
        &next,
        "imageGCHighThresholdPercent = 100\nimageGCLowThresholdPercent = 60\n",
    )
    .expect("write");
    std::fs::rename(&next, &config).expect("swap");
    assert!(next_notify(&manager).starts_with("RELOADING=1\n"));
    assert_eq!(
        next_notify(&manager),
        "READY=1\nSTATUS=Running: configuration reloaded"
    );
    let body = http_get(&metrics, "/metrics");
    assert!(
        body.contains("\nimagekeeper_config_reloads_total{result=\"success\"} 1\n"),
        "{body}"
    );
    assert!(
        body.contains("\nimagekeeper_image_gc_low_threshold_percent 60\n"),
        "{body}"
    );
    // Unchanged since: SIGTERM's STOPPING=1 is the next message, no second reload.
    service.signal(libc::SIGTERM);
    assert_eq!(next_notify(&manager), "STOPPING=1");
    assert_eq!(service.wait().code(), Some(0));
}

/// `--config-watch-period` watches `warmSetDir` too: a ConfigMap-style update (a new
/// timestamped directory, `..data` swapped to it) is reloaded without a signal, framed as a
/// SIGHUP's reload; an unchanged directory reloads nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watched_warm_set_directory_that_changes_is_reloaded_without_a_signal() {
    let AgentFixture { fake, dir, .. } = AgentFixture::builder().image_fs_used(1000).start().await;
    std::fs::write(
        dir.path().join("imagekeeper.toml"),
        "imageGCHighThresholdPercent = 100\n",
    )
    .expect("write config");
    let warm = dir.path().join("warm");
    let first = warm.join("..2026_01_01");
    std::fs::create_dir_all(&first).expect("mkdir");
    std::fs::write(
        first.join("gpu.yaml"),
        "warm:\n  - image: registry.example/a:1\n",
    )
    .expect("write");
    std::os::unix::fs::symlink("..2026_01_01", warm.join("..data")).expect("symlink");
    std::os::unix::fs::symlink("..data/gpu.yaml", warm.join("gpu.yaml")).expect("symlink");
    let notify_path = dir.path().join("notify.sock");
    let manager = UnixDatagram::bind(&notify_path).expect("bind the notify socket");
    let mut service = start_service(
        &fake,
        dir.path(),
        notify_path.to_str().expect("utf8"),
        &[
            "--metrics-address",
            "127.0.0.1:0",
            "--config-watch-period",
            "1s",
            "--warm-set-dir",
            warm.to_str().expect("utf8"),
        ],
    );
    let _metrics = service.metrics_address().await;
    assert!(next_notify(&manager).starts_with("READY=1\n"));
    // The kubelet's update of a ConfigMap volume: a new directory, then `..data` swapped.
    let second = warm.join("..2026_01_02");
    std::fs::create_dir_all(&second).expect("mkdir");
    std::fs::write(
        second.join("gpu.yaml"),
        "warm:\n  - image: registry.example/a:1\n  - image: registry.example/b:1\n",
    )
    .expect("write");
    std::os::unix::fs::symlink("..2026_01_02", warm.join("..data.tmp")).expect("symlink");
    std::fs::rename(warm.join("..data.tmp"), warm.join("..data")).expect("swap");
    assert!(next_notify(&manager).starts_with("RELOADING=1\n"));
    assert_eq!(
        next_notify(&manager),
        "READY=1\nSTATUS=Running: configuration reloaded"
    );
    service.signal(libc::SIGTERM);
    assert_eq!(next_notify(&manager), "STOPPING=1");
    assert_eq!(service.wait().code(), Some(0));
}

#[test]
fn a_config_watch_without_a_config_file_or_under_a_second_exits_2() {
    for (args, want) in [
        (
            vec!["run", "--config-watch-period", "1s"],
            "--config-watch-period: there is no --config file nor warmSetDir to watch",
        ),
        (
            vec![
                "run",
                "--config",
                "x.toml",
                "--config-watch-period",
                "500ms",
            ],
            "must be 0s (off) or at least 1s",
        ),
    ] {
        let out = crate::support::bin::run(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(want), "{args:?}: {stderr}");
    }
}

/// Issue 31: the config file replaced by a FIFO, then SIGHUP. The reload's open(2) used to
/// wait for a writer on an async worker: detect and GC stopped, `/healthz` went silent and
/// SIGTERM was ignored until the agent was SIGKILLed. Now the reload fails at once, naming the
/// file, on the blocking pool; the agent keeps its configuration, answers `/healthz`, and ends
/// on SIGTERM within its grace period.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_config_replaced_by_a_fifo_fails_the_reload_and_the_agent_answers_and_stops() {
    let AgentFixture { fake, dir, .. } = AgentFixture::builder()
        .image("sha256:aaa", "registry.example/a:1", 1000)
        .image_fs_used(1000)
        .start()
        .await;
    let config = dir.path().join("imagekeeper.toml");
    std::fs::write(&config, "imageGCHighThresholdPercent = 100\n").expect("write config");
    let notify_path = dir.path().join("notify.sock");
    let manager = UnixDatagram::bind(&notify_path).expect("bind the notify socket");
    let grace = Duration::from_secs(5);
    let mut service = start_service(
        &fake,
        dir.path(),
        notify_path.to_str().expect("utf8"),
        &[
            "--metrics-address",
            "127.0.0.1:0",
            "--shutdown-grace-seconds",
            &grace.as_secs().to_string(),
        ],
    );
    let metrics = service.metrics_address().await;
    let ready = next_notify(&manager);
    assert!(ready.starts_with("READY=1\n"), "{ready:?}");

    std::fs::remove_file(&config).expect("remove config");
    let c = std::ffi::CString::new(config.to_str().expect("utf8")).expect("no NUL");
    // SAFETY: mkfifo(3) on a NUL-terminated path in the test's temp dir.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
    service.signal(libc::SIGHUP);
    assert!(next_notify(&manager).starts_with("RELOADING=1\n"));
    let done = next_notify(&manager);
    assert_eq!(
        done,
        format!(
            "READY=1\nSTATUS=Running: reload failed, configuration kept: config file {}: not a regular file (a FIFO)",
            config.display()
        )
    );
    let healthz = http_get(&metrics, "/healthz");
    assert!(healthz.starts_with("HTTP/1.1 200 OK"), "{healthz}");
    let body = http_get(&metrics, "/metrics");
    assert!(
        body.contains("\nimagekeeper_config_reloads_total{result=\"failure\"} 1\n"),
        "{body}"
    );

    // SIGTERM ends it within the grace period; past it a watchdog kills it and the test fails.
    service.signal(libc::SIGTERM);
    assert_eq!(next_notify(&manager), "STOPPING=1");
    let pid = i32::try_from(service.child.id()).expect("pid fits i32");
    let (exited, exited_rx) = std::sync::mpsc::channel::<()>();
    let watchdog = std::thread::spawn(move || {
        let late = exited_rx.recv_timeout(grace).is_err();
        if late {
            // SAFETY: kill(2) on our own child, not reaped yet (the wait below reaps it).
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        late
    });
    let status = service.wait();
    let _ = exited.send(());
    assert!(
        !watchdog.join().expect("watchdog"),
        "SIGTERM did not end the agent within {grace:?}"
    );
    assert_eq!(status.code(), Some(0));
}

/// `run --healthz-address`: the probes' own listener answers `/healthz` and `/readyz` (ready
/// once the first detect is done) and serves no metrics; the agent logs where it listens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_serves_the_probes_on_the_healthz_address_and_no_metrics_there() {
    use std::io::BufRead;
    let AgentFixture { fake, dir, .. } = AgentFixture::builder()
        .image("sha256:aaa", "registry.example/a:1", 1000)
        .image_fs_used(1000)
        .start()
        .await;
    std::fs::write(dir.path().join("imagekeeper.toml"), "pinnedImages = []\n").expect("write");
    let notify_path = dir.path().join("notify.sock");
    let manager = UnixDatagram::bind(&notify_path).expect("bind the notify socket");
    let mut service = start_service(
        &fake,
        dir.path(),
        notify_path.to_str().expect("utf8"),
        &["--healthz-address", "127.0.0.1:0"],
    );
    let stderr = service.child.stderr.take().expect("piped stderr");
    // The log line names the port the kernel chose; the rest of stderr is drained.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut tx = Some(tx);
        for line in std::io::BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if line.contains("Serving health probes")
                && let Some(address) = line
                    .split_whitespace()
                    .find_map(|w| w.strip_prefix("address="))
                && let Some(tx) = tx.take()
            {
                let _ = tx.send(address.to_owned());
            }
        }
    });
    let address = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("a \"Serving health probes\" line");
    let ready = next_notify(&manager);
    assert!(ready.starts_with("READY=1\n"), "{ready:?}");
    let healthz = http_get(&address, "/healthz");
    assert!(healthz.starts_with("HTTP/1.1 200 OK"), "{healthz}");
    assert!(healthz.contains("ok: alive"), "{healthz}");
    let readyz = http_get(&address, "/readyz");
    assert!(readyz.starts_with("HTTP/1.1 200 OK"), "{readyz}");
    let metrics = http_get(&address, "/metrics");
    assert!(metrics.starts_with("HTTP/1.1 404"), "{metrics}");
    service.signal(libc::SIGTERM);
    assert_eq!(next_notify(&manager), "STOPPING=1");
    assert_eq!(service.wait().code(), Some(0));
}

/// Issue 31: a reload of a file caught empty (an editor truncating it in place) or holding
/// only comments keeps the running configuration, pins included, and says why; a file that
/// says `# imagekeeper: empty` resets every setting to its default, as it asks.
#[tokio::test]
async fn a_reload_of_an_empty_file_keeps_the_pins_unless_the_file_says_it_is_empty() {
    let AgentFixture { fake, dir, .. } = AgentFixture::builder()
        .image("sha256:aaa", "registry.example/a:1", 1000)
        .image_fs_used(1000)
        .start()
        .await;
    let file = dir.path().join("imagekeeper.toml");
    std::fs::write(&file, "pinnedImages = [\"registry.example/a:*\"]\n").expect("write");
    let agent = agent_with_config_file(&fake, dir.path(), &file, FlagValues::default()).await;
    let pins = |agent: &Agent| agent.gc_manager().config().pins.patterns().to_vec();
    assert_eq!(pins(&agent), ["registry.example/a:*"]);
    for text in ["", "# pinnedImages = [\"registry.example/a:*\"]\n"] {
        std::fs::write(&file, text).expect("truncate");
        let err = agent.reload().await.expect_err(text).to_string();
        assert!(err.contains("the file sets nothing"), "{text:?}: {err}");
        assert!(err.contains(&file.display().to_string()), "{err}");
        assert_eq!(pins(&agent), ["registry.example/a:*"], "{text:?}: kept");
    }
    std::fs::write(&file, "# imagekeeper: empty\n").expect("write");
    let report = agent.reload().await.expect("an empty file that says so");
    assert_eq!(report.changed, ["pinnedImages"]);
    assert!(
        pins(&agent).is_empty(),
        "every setting is back to its default"
    );
}

/// `NOTIFY_SOCKET=@name` is a socket in the abstract namespace (no file): the agent reaches
/// it, and a failing first detect says why in STATUS= before READY=1 arrives, once the
/// runtime answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notify_socket_in_the_abstract_namespace_and_status_while_the_first_detect_fails() {
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::net::SocketAddr;
    let AgentFixture { fake, dir, .. } = AgentFixture::builder()
        .image("sha256:aaa", "registry.example/a:1", 1000)
        .image_fs_used(1000)
        .start()
        .await;
    fake.fail(
        "ListImages",
        imagekeeper::cri::RpcCode::Unavailable,
        "runtime starting",
    );
    std::fs::write(
        dir.path().join("imagekeeper.toml"),
        "imageGCHighThresholdPercent = 100\n",
    )
    .expect("write config");
    let unique = dir
        .path()
        .file_name()
        .expect("a temp dir has a name")
        .to_string_lossy()
        .into_owned();
    let name = format!("imagekeeper-it-{}-{unique}", std::process::id());
    let manager = UnixDatagram::bind_addr(
        &SocketAddr::from_abstract_name(name.as_bytes()).expect("abstract name"),
    )
    .expect("bind abstract");
    let mut service = start_service(&fake, dir.path(), &format!("@{name}"), &[]);

    let status = next_notify(&manager);
    assert!(
        status.starts_with("STATUS=First detect failed, retrying: "),
        "{status:?}"
    );
    assert!(status.contains("runtime starting"), "{status:?}");
    fake.clear("ListImages");
    // Statuses of further failed retries may come first; READY=1 comes once one succeeds.
    let ready = loop {
        let message = next_notify(&manager);
        if !message.starts_with("STATUS=First detect failed") {
            break message;
        }
    };
    assert!(ready.starts_with("READY=1\n"), "{ready:?}");
    service.signal(libc::SIGTERM);
    assert_eq!(next_notify(&manager), "STOPPING=1");
    assert_eq!(service.wait().code(), Some(0));
}

/// The unit file's `[Service]` settings, `ExecStart` with its continuation lines joined.
fn unit_settings(text: &str) -> Vec<(String, String)> {
    let joined = text.replace("\\\n", " ");
    joined
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#') && !l.starts_with('['))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.trim().to_owned()))
        .collect()
}

/// `deploy/imagekeeper.service` as shipped: its ExecStart, with the installed paths moved
/// into a temporary directory and the runtime's socket pointed at the fake, starts the agent
/// and reaches READY=1; its ExecReload (SIGHUP) reloads; its stop timeout leaves the cycle in
/// flight its grace period; `systemd-analyze verify` (when installed) finds nothing to say.
/// The test fails when the unit drifts from the flags the binary takes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shipped_systemd_unit_starts_reaches_ready_reloads_and_verifies() {
    let unit_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/imagekeeper.service");
    let text = std::fs::read_to_string(&unit_path).expect("read the unit");
    let settings = unit_settings(&text);
    let get = |key: &str| -> Vec<&str> {
        settings
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
            .collect()
    };
    assert_eq!(get("Type"), ["notify"]);
    assert_eq!(get("ExecReload"), ["/bin/kill -HUP $MAINPID"]);
    assert_eq!(get("StateDirectoryMode"), ["0700"]);
    assert_eq!(get("RuntimeDirectoryMode"), ["0700"]);
    let exec = get("ExecStart");
    assert_eq!(exec.len(), 1);
    let mut words = exec[0].split_whitespace();
    assert_eq!(words.next(), Some("/usr/local/bin/imagekeeper"));
    let args: Vec<&str> = words.collect();
    let grace: u64 = args
        .windows(2)
        .find(|w| w[0] == "--shutdown-grace-seconds")
        .map(|w| w[1].parse().expect("seconds"))
        .unwrap_or(30);
    let stop: u64 = get("TimeoutStopSec")[0]
        .trim_end_matches('s')
        .parse()
        .expect("TimeoutStopSec in seconds");
    assert!(
        stop > grace + 5,
        "TimeoutStopSec {stop} must cover the grace {grace} + 5 s"
    );

    let AgentFixture { fake, dir, .. } = AgentFixture::builder()
        .image("sha256:aaa", "registry.example/a:1", 1000)
        .image_fs_used(1000)
        .start()
        .await;
    let root = dir.path();
    for sub in ["etc/imagekeeper", "var/lib/imagekeeper", "run/imagekeeper"] {
        std::fs::create_dir_all(root.join(sub)).expect("mkdir");
    }
    // Spare the host's disk from the space pass (its threshold comes from the file).
    std::fs::write(
        root.join("etc/imagekeeper/imagekeeper.toml"),
        "imageGCHighThresholdPercent = 100\n",
    )
    .expect("write config");
    let moved: Vec<String> = args
        .iter()
        .map(|a| {
            let a = a.replace("unix:///run/containerd/containerd.sock", &fake.endpoint());
            [
                "/etc/imagekeeper",
                "/var/lib/imagekeeper",
                "/run/imagekeeper",
            ]
            .iter()
            .fold(a, |a, dir| {
                a.replace(dir, &format!("{}{dir}", root.display()))
            })
        })
        .collect();
    let notify_path = root.join("notify.sock");
    let manager = UnixDatagram::bind(&notify_path).expect("bind the notify socket");
    let child = Command::new(env!("CARGO_BIN_EXE_imagekeeper"))
        .args(&moved)
        .env("NOTIFY_SOCKET", &notify_path)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn the unit's command");
    let mut service = AgentChild { child };
    assert!(next_notify(&manager).starts_with("READY=1\n"));
    service.signal(libc::SIGHUP);
    assert!(next_notify(&manager).starts_with("RELOADING=1\n"));
    assert_eq!(
        next_notify(&manager),
        "READY=1\nSTATUS=Running: configuration reloaded"
    );
    service.signal(libc::SIGTERM);
    assert_eq!(next_notify(&manager), "STOPPING=1");
    assert_eq!(service.wait().code(), Some(0));

    // systemd's own check of the unit, with ExecStart at the binary under test.
    let verify_dir = root.join("unit");
    std::fs::create_dir_all(&verify_dir).expect("mkdir");
    let verify_unit = verify_dir.join("imagekeeper.service");
    std::fs::write(
        &verify_unit,
        text.replace(
            "/usr/local/bin/imagekeeper",
            env!("CARGO_BIN_EXE_imagekeeper"),
        ),
    )
    .expect("write the unit copy");
    match Command::new("systemd-analyze")
        .arg("verify")
        .arg(&verify_unit)
        .output()
    {
        Err(e) => eprintln!("systemd-analyze verify: skipped ({e})"),
        Ok(out) => {
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "{stderr}");
            assert!(stderr.trim().is_empty(), "systemd-analyze says: {stderr}");
        }
    }
}

/// `prune --dry-run` (no agent) prints its plan in every format: the table (`wide` adds the
/// bytes, `--no-headers` keeps the rows alone), the legacy JSON, the List of `ImageRemoval`
/// items (`kube-json`, `yaml`) and `name`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dry_run_plan_prints_in_every_output_format() {
    let AgentFixture {
        fake,
        dir: _dir,
        db,
        socket,
    } = AgentFixture::builder()
        .image("sha256:aaa", "registry.example/a:1", 1000)
        .image("sha256:bbb", "registry.example/b:1", 2000)
        .image_fs_used(3000)
        .socket("no-agent.sock")
        .start()
        .await;
    let endpoint = fake.endpoint();
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_imagekeeper"))
            .args(args)
            .args([
                "--minimum-image-ttl-duration=0s",
                "--image-gc-high-threshold=100",
            ])
            .arg(format!("--db={}", db.display()))
            .arg(format!("--admin-socket={}", socket.display()))
            .arg(format!("--container-runtime-endpoint={endpoint}"))
            .output()
            .expect("run");
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(0), "{args:?}: {stderr}");
        String::from_utf8(out.stdout).expect("utf8")
    };
    // A real gc with the space pass off records the images (the dry run needs a database).
    run(&["gc"]);

    let legacy: serde_json::Value =
        serde_json::from_str(&run(&["prune", "--dry-run", "--output", "json"])).expect("json");
    assert_eq!(legacy["dry_run"], true);
    let list: serde_json::Value =
        serde_json::from_str(&run(&["prune", "--dry-run", "-o", "kube-json"])).expect("json");
    assert_eq!(list["kind"], "List");
    let items = list["items"].as_array().expect("items");
    let names: Vec<&str> = items
        .iter()
        .map(|i| i["metadata"]["name"].as_str().expect("name"))
        .collect();
    assert_eq!(names, ["sha256:aaa", "sha256:bbb"]);
    assert!(
        items
            .iter()
            .all(|i| i["kind"] == "ImageRemoval" && i["dryRun"] == true && i["reason"] == "unused")
    );
    assert_eq!(items[1]["sizeBytes"], 2000);
    let yaml: serde_json::Value =
        serde_yaml_ng::from_str(&run(&["prune", "--dry-run", "-o", "yaml"])).expect("yaml");
    assert_eq!(yaml, list);
    assert_eq!(
        run(&["prune", "--dry-run", "-o", "name"]),
        "imageremoval/sha256:aaa\nimageremoval/sha256:bbb\n"
    );
    let wide = run(&["prune", "--dry-run", "-o", "wide"]);
    assert!(
        wide.lines().next().expect("header").contains("BYTES"),
        "{wide}"
    );
    assert!(wide.contains("would remove 2 image(s)"), "{wide}");
    let bare = run(&["prune", "--dry-run", "--no-headers", "--no-trunc"]);
    let lines: Vec<&str> = bare.lines().collect();
    assert_eq!(lines.len(), 2, "{bare}");
    assert!(lines[0].starts_with("sha256:aaa "), "{bare}");
}

/// What a reload cannot swap is named, never reported as nothing: a moved `kubeletRootDir`
/// changes where GC reads the kubelet's pull records at once, but the node credentials' search
/// path (which starts at the kubelet root dir) was built at start; and the credential provider
/// config's contents, edited in place at the same path, are not reloaded (the plugins loaded at
/// start keep running).
#[tokio::test]
async fn a_reload_names_the_credential_settings_that_wait_for_a_restart() {
    let AgentFixture { fake, dir, .. } = AgentFixture::builder()
        .image("sha256:aaa", "registry.example/a:1", 1000)
        .image_fs_used(1000)
        .start()
        .await;
    let bin_dir = dir.path().join("plugins");
    std::fs::create_dir(&bin_dir).expect("bin dir");
    let plugin = bin_dir.join("p");
    std::fs::write(&plugin, "#!/bin/sh\nexit 1\n").expect("plugin");
    std::fs::set_permissions(&plugin, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    let providers = dir.path().join("providers.yaml");
    let provider_config = |glob: &str| {
        format!(
            "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders:\n- name: p\n  matchImages: ['{glob}']\n  defaultCacheDuration: 1m\n  apiVersion: credentialprovider.kubelet.k8s.io/v1\n"
        )
    };
    std::fs::write(&providers, provider_config("*.example.com")).expect("providers");
    let (root_a, root_b) = (dir.path().join("kubelet-a"), dir.path().join("kubelet-b"));
    let file = dir.path().join("imagekeeper.toml");
    let config = |root: &Path| {
        format!(
            "imageGCHighThresholdPercent = 100\nkubeletRootDir = {:?}\nimageCredentialProviderConfig = {:?}\nimageCredentialProviderBinDir = {:?}\n",
            root.display().to_string(),
            providers.display().to_string(),
            bin_dir.display().to_string()
        )
    };
    std::fs::write(&file, config(&root_a)).expect("write config");
    let agent = agent_with_config_file(&fake, dir.path(), &file, FlagValues::default()).await;

    // Nothing changed: nothing to report.
    let report = agent.reload().await.expect("reload");
    assert!(report.changed.is_empty(), "{report:?}");
    assert!(report.needs_restart.is_empty(), "{report:?}");

    std::fs::write(&file, config(&root_b)).expect("rewrite config");
    let report = agent.reload().await.expect("reload");
    assert_eq!(report.changed, ["kubeletRootDir"]);
    assert_eq!(
        report.needs_restart,
        ["kubeletRootDir (the node credentials' search path)"]
    );

    std::fs::write(&providers, provider_config("*.other.example")).expect("edit providers");
    let report = agent.reload().await.expect("reload");
    assert!(report.changed.is_empty(), "{report:?}");
    assert_eq!(report.needs_restart, ["imageCredentialProviderConfig"]);
}

/// A reload names the settings the running agent keeps until a restart (`runtimePins`,
/// `containerdAddress`: the runtime pins' writer is built at start) and swaps in the removal
/// order (`imageGCPolicy`, documented as applied on reload), rather than logging
/// `changed=nothing` and keeping the old order.
#[tokio::test]
async fn a_reload_swaps_in_the_gc_policy_and_names_the_runtime_pin_settings_that_wait_for_a_restart()
 {
    let AgentFixture { fake, dir, .. } = AgentFixture::builder()
        .image("sha256:aaa", "registry.example/a:1", 1000)
        .image_fs_used(1000)
        .start()
        .await;
    let file = dir.path().join("imagekeeper.toml");
    std::fs::write(&file, "imageGCHighThresholdPercent = 100\n").expect("write config");
    let agent = agent_with_config_file(&fake, dir.path(), &file, FlagValues::default()).await;
    let running = agent.config();
    assert_eq!(agent.gc_manager().config().order, GcOrder::KubeletOrder);

    std::fs::write(
        &file,
        "imageGCHighThresholdPercent = 100\nimageGCPolicy = \"predictive\"\nruntimePins = \"off\"\ncontainerdAddress = \"/run/other/containerd.sock\"\n",
    )
    .expect("rewrite config");
    let report = agent.reload().await.expect("a valid file reloads");
    assert_eq!(report.changed, ["imageGCPolicy"], "{report:?}");
    assert_eq!(
        report.needs_restart,
        ["runtimePins", "containerdAddress"],
        "{report:?}"
    );
    assert_eq!(agent.gc_manager().config().order, GcOrder::Predictive);
    let now = agent.config();
    assert_eq!(
        now.runtime_pins, running.runtime_pins,
        "kept until a restart"
    );
    assert_eq!(now.containerd_address, running.containerd_address);
}
