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
            "imagekeeper: ImageInspectError: Failed to inspect image \"busybox:1.35\": rpc error: code = Unavailable"
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
