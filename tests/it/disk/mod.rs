//! `imagekeeper inspect disk` and `prune --orphans`: their flags and failures without a runtime
//! here, the prune's rules in `prune`; against the lab's real containerd in `lab` (an orphaned
//! snapshot, another namespace's image, a blob with no image, leases, a running container, each
//! named with its `du`-measured size; then `prune --orphans` reclaims the leftovers).

mod lab;
mod prune;

use crate::support::bin;

#[test]
fn inspect_disk_refuses_a_bad_endpoint_and_fails_on_a_runtime_that_is_not_there() {
    let bad = bin::run(&[
        "inspect",
        "disk",
        "--container-runtime-endpoint",
        "tcp://127.0.0.1:1",
    ]);
    assert_eq!(bad.status.code(), Some(2), "{bad:?}");
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("only unix:// endpoints are supported"),
        "{bad:?}"
    );
    let dir = tempfile::tempdir().expect("a temp dir");
    let socket = format!("unix://{}/none.sock", dir.path().display());
    let gone = bin::run(&[
        "inspect",
        "disk",
        "--container-runtime-endpoint",
        &socket,
        "--runtime-timeout",
        "2s",
    ]);
    assert_eq!(gone.status.code(), Some(1), "{gone:?}");
    let stderr = String::from_utf8_lossy(&gone.stderr);
    assert!(stderr.contains("none.sock"), "names the socket: {stderr}");
}

#[test]
fn inspect_disk_help_lists_every_json_field() {
    let help = bin::run(&["inspect", "disk", "--help"]);
    assert_eq!(help.status.code(), Some(0));
    let text = String::from_utf8_lossy(&help.stdout);
    for (field, _) in imagekeeper::disk::JSON_FIELDS {
        assert!(text.contains(&format!("  {field}: ")), "{field} in --help");
    }
}

#[test]
fn prune_orphans_fails_on_a_runtime_that_is_not_there_and_its_flags_need_orphans() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let socket = format!("unix://{}/none.sock", dir.path().display());
    let admin = dir.path().join("admin.sock").display().to_string();
    let db = dir.path().join("records.redb").display().to_string();
    for dry in [true, false] {
        let mut args = vec![
            "prune",
            "--orphans",
            "--container-runtime-endpoint",
            &socket,
            "--admin-socket",
            &admin,
            "--db",
            &db,
        ];
        if dry {
            args.push("--dry-run");
        }
        let out = bin::run(&args);
        assert_eq!(out.status.code(), Some(1), "dry run {dry}: {out:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("none.sock"), "names the socket: {stderr}");
    }
    let out = bin::run(&["prune", "--min-age", "1h"]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "--min-age needs --orphans: {out:?}"
    );
}

/// `inspect disk --agent`: no agent on the socket is a failure naming it (exit 1), never a
/// silent fallback to reading containerd here; `--agent` with `--containerd-address` (the
/// agent reads its own) and `--admin-socket` without `--agent` are usage errors (exit 2).
#[test]
fn inspect_disk_through_the_agent_fails_naming_the_socket_when_none_answers() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let admin = dir.path().join("admin.sock").display().to_string();
    let out = bin::run(&[
        "inspect",
        "disk",
        "--agent",
        "--admin-socket",
        &admin,
        "--runtime-timeout",
        "2s",
    ]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("admin.sock"), "names the socket: {stderr}");
    for usage in [
        &[
            "inspect",
            "disk",
            "--agent",
            "--containerd-address",
            "/run/x.sock",
        ][..],
        &["inspect", "disk", "--admin-socket", &admin],
    ] {
        let out = bin::run(usage);
        assert_eq!(out.status.code(), Some(2), "{usage:?}: {out:?}");
    }
}
