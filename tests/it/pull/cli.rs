//! `imagekeeper pull` as a process, where the outcome does not need a runtime: the database
//! is refused while another process has it open, and an invalid image name is bad input.

use std::path::Path;
use std::process::{Command, Output};

use imagekeeper::model::UnixNanos;
use imagekeeper::store::Store;

/// A socket path where nothing listens.
const NO_RUNTIME: &str = "unix:///nonexistent/imagekeeper-test/containerd.sock";

/// Runs `imagekeeper pull <args>` with `--db db`.
pub fn imagekeeper_pull(db: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_imagekeeper"))
        .arg("pull")
        .args(args)
        .arg("--db")
        .arg(db)
        .env_remove("IMAGEKEEPER_LOG")
        .output()
        .expect("the imagekeeper binary runs")
}

pub fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn pull_refuses_a_database_another_process_has_open_with_exit_1() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("records.redb");
    let agent = Store::open(&db, UnixNanos::from_secs(1_800_000_000)).expect("open store");
    let out = imagekeeper_pull(
        &db,
        &["busybox", "--container-runtime-endpoint", NO_RUNTIME],
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains(&format!(
            "database {} is already open by another process",
            db.display()
        )),
        "{err}"
    );
    assert!(out.stdout.is_empty());
    drop(agent);
}

#[test]
fn pull_of_an_invalid_image_name_exits_2_with_kubelets_reason_and_message() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("records.redb");
    let out = imagekeeper_pull(
        &db,
        &["Bad Image", "--container-runtime-endpoint", NO_RUNTIME],
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(
            "imagekeeper: InvalidImageName: Failed to apply default image tag \"Bad Image\": "
        ),
        "{}",
        stderr(&out)
    );
}

#[test]
fn pull_with_no_runtime_is_image_inspect_error_with_exit_1() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("records.redb");
    let out = imagekeeper_pull(
        &db,
        &["busybox:1.35", "--container-runtime-endpoint", NO_RUNTIME],
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(
            // The kubelet prints the ref GetImageRef returned, "" on error.
            "imagekeeper: ImageInspectError: Failed to inspect image \"\": rpc error: code = Unavailable"
        ),
        "{}",
        stderr(&out)
    );
}

#[test]
fn pull_rejects_an_unknown_policy_and_a_tcp_endpoint_as_usage_errors() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("records.redb");
    let bad_policy = imagekeeper_pull(&db, &["busybox", "--policy", "Sometimes"]);
    assert_eq!(bad_policy.status.code(), Some(2), "{}", stderr(&bad_policy));
    let tcp = imagekeeper_pull(
        &db,
        &[
            "busybox",
            "--container-runtime-endpoint",
            "tcp://127.0.0.1:1",
        ],
    );
    assert_eq!(tcp.status.code(), Some(2), "{}", stderr(&tcp));
    assert!(
        stderr(&tcp).contains("only unix:// endpoints are supported"),
        "{}",
        stderr(&tcp)
    );
}

#[test]
fn pull_without_an_agent_waits_for_the_database_another_process_holds() {
    use std::io::{BufRead, BufReader};
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("records.redb");
    let holder = Store::open(&db, UnixNanos::from_secs(1_800_000_000)).expect("open store");
    let mut child = Command::new(env!("CARGO_BIN_EXE_imagekeeper"))
        .args([
            "pull",
            "busybox:1.35",
            "--container-runtime-endpoint",
            NO_RUNTIME,
        ])
        .arg("--admin-socket")
        .arg(dir.path().join("no-agent.sock"))
        .arg("--db")
        .arg(&db)
        .env_remove("IMAGEKEEPER_LOG")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn pull");
    let mut stderr_lines = BufReader::new(child.stderr.take().expect("stderr"));
    let mut first = String::new();
    stderr_lines.read_line(&mut first).expect("read stderr");
    assert!(
        first.contains(&format!(
            "database {} is open by another process; waiting up to 10s",
            db.display()
        )),
        "{first}"
    );
    // The other process lets go while the pull waits: the pull goes on with the database.
    drop(holder);
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stderr_lines, &mut rest).expect("read stderr");
    let status = child.wait().expect("wait");
    assert_eq!(status.code(), Some(1), "{rest}");
    assert!(!rest.contains("already open"), "{rest}");
    assert!(
        rest.contains("ImageInspectError: Failed to inspect image \"\": "),
        "it got the database and went on to the (absent) runtime: {rest}"
    );
}

#[test]
fn pull_never_echoes_credentials_in_a_rejected_image_name() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("records.redb");
    for image in [
        "user:s3cret@registry.example/Bad Image",
        "https://user:s3cret@registry.example/app:1",
        "user:s3cret\"quoted@registry.example/app",
    ] {
        let out = imagekeeper_pull(&db, &[image, "--container-runtime-endpoint", NO_RUNTIME]);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{image}: {err}");
        assert!(
            !err.contains("s3cret"),
            "{image}: credentials echoed: {err}"
        );
        assert!(err.contains("REDACTED"), "{image}: {err}");
    }
}

fn as_nobody(args: &[&str]) -> Output {
    use std::os::unix::process::CommandExt;
    Command::new(env!("CARGO_BIN_EXE_imagekeeper"))
        .args(args)
        .env_remove("IMAGEKEEPER_LOG")
        .uid(65534)
        .gid(65534)
        .output()
        .expect("the imagekeeper binary runs as nobody")
}

#[test]
fn a_user_without_access_is_told_the_admin_socket_is_root_only() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let socket = dir.path().join("admin.sock");
    let _agent = std::os::unix::net::UnixListener::bind(&socket).expect("bind");
    std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let db = dir.path().join("records.redb");
    let socket_arg = socket.to_str().expect("utf8");
    let db_arg = db.to_str().expect("utf8");
    for args in [
        vec![
            "gc",
            "--dry-run",
            "--admin-socket",
            socket_arg,
            "--db",
            db_arg,
        ],
        vec![
            "pull",
            "busybox",
            "--admin-socket",
            socket_arg,
            "--db",
            db_arg,
        ],
    ] {
        let out = as_nobody(&args);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(
            err.contains(&format!(
                "admin socket {socket_arg}: permission denied; the agent's admin socket is root-only"
            )),
            "{args:?}: {err}"
        );
        assert!(!db.exists(), "{args:?}: no fallback to the database");
    }
}

#[test]
fn a_permission_error_is_said_once() {
    // A database in a directory only root may enter (tempdir makes it 0700).
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("records.redb");
    let out = as_nobody(&[
        "pull",
        "busybox",
        "--admin-socket",
        "/nonexistent/imagekeeper/admin.sock",
        "--container-runtime-endpoint",
        NO_RUNTIME,
        "--db",
        db.to_str().expect("utf8"),
    ]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.matches("Permission denied").count(), 1, "{err}");
    assert!(err.contains(&format!("database {}", db.display())), "{err}");
}

#[test]
fn commands_refuse_a_database_that_is_not_a_regular_file_with_exit_2() {
    use std::os::unix::fs::FileTypeExt;
    let dir = tempfile::tempdir().expect("temp dir");
    let fifo = dir.path().join("records.redb");
    let c = std::ffi::CString::new(fifo.to_str().expect("utf8")).expect("no NUL");
    // SAFETY: mkfifo(3) on a path in our temp dir.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
    let trace =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/replay/lru_order_survives_restart.jsonl");
    let fifo_arg = fifo.to_str().expect("utf8");
    let no_agent = dir.path().join("no-agent.sock");
    let no_agent = no_agent.to_str().expect("utf8");
    for args in [
        vec![
            "pull",
            "busybox",
            "--container-runtime-endpoint",
            NO_RUNTIME,
            "--admin-socket",
            no_agent,
            "--db",
            fifo_arg,
        ],
        vec![
            "gc",
            "--container-runtime-endpoint",
            NO_RUNTIME,
            "--admin-socket",
            no_agent,
            "--db",
            fifo_arg,
        ],
        vec![
            "prune",
            "--dry-run",
            "--container-runtime-endpoint",
            NO_RUNTIME,
            "--admin-socket",
            no_agent,
            "--db",
            fifo_arg,
        ],
        vec!["replay", trace.to_str().expect("utf8"), "--db", fifo_arg],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_imagekeeper"))
            .args(&args)
            .output()
            .expect("run");
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains("is a FIFO (named pipe), not a regular file"),
            "{args:?}: {err}"
        );
        let kind = std::fs::symlink_metadata(&fifo)
            .expect("still there")
            .file_type();
        assert!(kind.is_fifo(), "{args:?}: the FIFO is left as it was");
    }
}

#[test]
fn a_looser_database_is_tightened_to_0600_and_said_once() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("records.redb");
    drop(Store::open(&db, UnixNanos::from_secs(1_800_000_000)).expect("open store"));
    std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let out = imagekeeper_pull(
        &db,
        &["busybox:1.35", "--container-runtime-endpoint", NO_RUNTIME],
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(
        err.matches("readable or writable by others; its mode is now 0600")
            .count(),
        1,
        "{err}"
    );
    let mode = std::fs::metadata(&db).expect("stat").permissions().mode() & 0o7777;
    assert_eq!(mode, 0o600);
}
