//! The admin socket's bounds from issue 41. Answers past gRPC's default 4 MiB: the agent's
//! `pins` with 1,000 maximum-length pins (5.1 MB) and a dry run's 20,000 warm entries that do
//! not fit (5.9 MB) failed with "decoded message length too large"; now the CLI reads the
//! agent's largest answer (`admin::MAX_ANSWER_BYTES`), and an answer past that is cut at the
//! end of its list with the count left out ("and N more"). And a client trickling one byte
//! at a time no longer holds a connection for ever.

use std::process::{Command, Output};
use std::sync::Arc;

use imagekeeper::admin::{
    self, AdminBackend, AdminClient, AdminLimits, EnsureImageError, EnsureRequest, GcOutcome,
    MAX_ANSWER_BYTES, WarmDoesNotFit,
};
use imagekeeper::model::{ImagePin, MAX_IMAGE_NAME_BYTES, MAX_PIN_REASON_BYTES, PinKey, UnixNanos};
use imagekeeper::store::{Batch, Store};

use crate::support::agent::{AgentChild, AgentFixture, next_notify};

fn imagekeeper(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_imagekeeper"))
        .args(args)
        .output()
        .expect("run imagekeeper")
}

/// The issue's first case: 1,000 pins with 4,096-byte names and 1,024-byte reasons, listed
/// through the running agent (the real binary).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_maximum_length_pins_are_listed_through_the_agent() {
    let AgentFixture {
        fake,
        dir: _dir,
        db,
        socket,
    } = AgentFixture::builder()
        .image("sha256:aaa", "registry.example/model:1", 1000)
        .image_fs_used(1000)
        .start()
        .await;
    {
        let store = Store::open(&db, UnixNanos(1)).expect("open");
        let mut batch = Batch::new();
        for n in 0..1000 {
            let prefix = format!("registry.example/r{n:04}/");
            let name = format!(
                "{prefix}{}",
                "a".repeat(MAX_IMAGE_NAME_BYTES - prefix.len())
            );
            assert_eq!(name.len(), MAX_IMAGE_NAME_BYTES);
            batch.put_pin(
                PinKey::new(name, ""),
                ImagePin {
                    created_at: UnixNanos(1),
                    until: UnixNanos::NEVER,
                    reason: "r".repeat(MAX_PIN_REASON_BYTES),
                },
            );
        }
        store.apply(&batch).expect("pins");
    }
    let notify_dir = tempfile::tempdir().expect("temp dir");
    let notify_path = notify_dir.path().join("notify.sock");
    let notify = std::os::unix::net::UnixDatagram::bind(&notify_path).expect("bind notify");
    let _agent = AgentChild::spawn(
        &fake.endpoint(),
        &db,
        &socket,
        notify_path.to_str().expect("utf8"),
        &["--image-gc-high-threshold", "100"],
    );
    let first = tokio::task::spawn_blocking(move || next_notify(&notify))
        .await
        .expect("join");
    assert!(first.starts_with("READY=1"), "{first}");
    let socket_arg = socket.to_str().expect("utf8");
    let out = imagekeeper(&["pins", "-o", "json", "--admin-socket", socket_arg]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("ran through the running agent"), "{stderr}");
    assert!(out.stdout.len() > 5_000_000, "{} bytes", out.stdout.len());
    let pins: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(pins.len(), 1000);
    assert!(!stderr.contains("more pins"), "nothing is cut: {stderr}");
}

/// A backend whose dry runs answer `warm` entries that do not fit, and `removals` removals.
struct LongAnswers {
    warm: Vec<WarmDoesNotFit>,
}

impl AdminBackend for LongAnswers {
    async fn ensure_image(&self, request: EnsureRequest) -> Result<String, EnsureImageError> {
        Err(EnsureImageError::InvalidPullPolicy(request.pull_policy))
    }

    async fn garbage_collect(&self, dry_run: bool) -> GcOutcome {
        GcOutcome {
            dry_run,
            warm_does_not_fit: self.warm.clone(),
            ..GcOutcome::default()
        }
    }

    async fn delete_unused(&self, dry_run: bool) -> GcOutcome {
        self.garbage_collect(dry_run).await
    }
}

/// `count` warm entries that do not fit, with names of `name_len` characters.
fn misfits(count: usize, name_len: usize) -> Vec<WarmDoesNotFit> {
    (0..count)
        .map(|n| {
            let prefix = format!("registry.example/models/m{n:06}/");
            WarmDoesNotFit {
                image: format!("{prefix}{}:1", "w".repeat(name_len - prefix.len() - 2)),
                runtime_handler: String::new(),
                size: Some(1 << 30),
                detail: "needs 1.0 GiB; the image filesystem would be at 99% (low threshold 80%)"
                    .to_owned(),
            }
        })
        .collect()
}

/// The issue's second case: a dry run through the agent whose 20,000 warm entries (names of
/// about 215 characters) do not fit, for `gc --dry-run` and `prune --dry-run`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dry_run_with_twenty_thousand_warm_entries_that_do_not_fit_is_answered_whole() {
    let dir = tempfile::tempdir().expect("temp dir");
    let socket = dir.path().join("admin.sock");
    let backend = LongAnswers {
        warm: misfits(20_000, 215),
    };
    admin::serve(&socket, Arc::new(backend), std::future::pending())
        .await
        .expect("serve");
    let socket_arg = socket.to_str().expect("utf8");
    for command in ["gc", "prune"] {
        let out = tokio::task::spawn_blocking({
            let socket_arg = socket_arg.to_owned();
            move || imagekeeper(&[command, "--dry-run", "--admin-socket", &socket_arg])
        })
        .await
        .expect("join");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{command}: {stderr}");
        let lines = stdout
            .lines()
            .filter(|l| l.starts_with("warm: ") && l.contains("does not fit"))
            .count();
        assert_eq!(lines, 20_000, "{command}: {stderr}");
        assert!(
            !stderr.contains("more warm"),
            "{command}: nothing is cut: {stderr}"
        );
    }
}

/// An answer past the agent's largest (`MAX_ANSWER_BYTES`): its list is cut at the end and the
/// CLI says how many more there were, instead of failing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_past_the_limit_is_cut_with_the_count_of_what_was_left_out() {
    let dir = tempfile::tempdir().expect("temp dir");
    let socket = dir.path().join("admin.sock");
    let name_len = 4000;
    let count = MAX_ANSWER_BYTES / name_len + 1000;
    admin::serve(
        &socket,
        Arc::new(LongAnswers {
            warm: misfits(count, name_len),
        }),
        std::future::pending(),
    )
    .await
    .expect("serve");
    let socket_arg = socket.to_str().expect("utf8").to_owned();
    let out = tokio::task::spawn_blocking(move || {
        imagekeeper(&["gc", "--dry-run", "--admin-socket", &socket_arg])
    })
    .await
    .expect("join");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let shown = stdout
        .lines()
        .filter(|l| l.starts_with("warm: ") && l.contains("does not fit"))
        .count();
    assert!(shown > 0 && shown < count, "{shown} of {count}");
    let more = count - shown;
    assert!(
        stderr.contains(&format!("and {more} more warm entries that do not fit")),
        "{stderr}"
    );
    assert!(
        stdout.contains(&format!("warm: and {more} more entries that do not fit")),
        "the table says it too"
    );
}

/// Issue 41 (9): a client sending one byte every so often (here every 500 ms, under an idle
/// timeout of 2 s) kept resetting the idle timer and held its connection for ever (64 of them
/// locked the CLI out). Now a connection with no call in flight for the idle timeout is
/// closed whatever it trickles; a real client's call is still served. The 30 s bound only
/// guards against a hang (the failure before the fix).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_trickling_bytes_without_a_call_is_closed_at_the_idle_timeout() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let dir = tempfile::tempdir().expect("temp dir");
    let socket = dir.path().join("admin.sock");
    let limits = AdminLimits {
        max_connections: 4,
        idle_timeout: std::time::Duration::from_secs(2),
    };
    admin::serve_with_limits(
        &socket,
        Arc::new(LongAnswers { warm: Vec::new() }),
        std::future::pending(),
        limits,
    )
    .await
    .expect("serve");
    let mut tricklers = tokio::task::JoinSet::new();
    for _ in 0..limits.max_connections {
        let mut conn = tokio::net::UnixStream::connect(&socket)
            .await
            .expect("connect");
        tricklers.spawn(async move {
            // The HTTP/2 preface, one byte at a time: never a whole call.
            let preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
            let mut sent = 0;
            let mut buf = [0u8; 256];
            loop {
                tokio::select! {
                    read = conn.read(&mut buf) => {
                        if matches!(read, Ok(0) | Err(_)) {
                            return sent;
                        }
                    }
                    () = tokio::time::sleep(std::time::Duration::from_millis(500)) => {
                        if sent == preface.len() || conn.write_all(&preface[sent..=sent]).await.is_err() {
                            // Out of preface bytes without being closed: the bug; or the
                            // write failed because the server closed it.
                            return sent;
                        }
                        sent += 1;
                    }
                }
            }
        });
    }
    let all_closed = tokio::time::timeout(std::time::Duration::from_secs(30), async {
        let mut sent = Vec::new();
        while let Some(n) = tricklers.join_next().await {
            sent.push(n.expect("join"));
        }
        sent
    })
    .await
    .expect("every trickling connection is closed within 30 s");
    for sent in all_closed {
        assert!(
            sent < 24,
            "closed only after the whole preface ({sent} bytes): it was never cut"
        );
    }
    // The slots are free again: a real client is served.
    let mut client = AdminClient::connect(&socket).await.expect("connect");
    client.garbage_collect(true).await.expect("served");
}
