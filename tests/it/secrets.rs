//! Image names that carry credentials (`user:password@registry/repo`): refused, exit 2 and
//! shown redacted, everywhere a name enters (the CLI's pin through the agent and on the
//! database, the admin `Pin` call, a warm entry at start and on a reload, the config file's
//! pinned images and sandbox image); the secret is then nowhere: not in the agent's log, not
//! in the database file, not in any `pins -o` format. A pin written before the refusal (a
//! database of an older agent) is shown redacted in every format.

use std::process::{Command, Output, Stdio};

use imagekeeper::admin::AdminClient;
use imagekeeper::model::{ImagePin, PinKey, UnixNanos};
use imagekeeper::store::{Batch, Store};

use crate::support::agent::{AgentFixture, next_notify};

const SECRET: &str = "S3cret";
const NAME: &str = "user:S3cret@127.0.0.1:5091/y:1";
const FORMATS: [&str; 6] = ["table", "wide", "json", "kube-json", "yaml", "name"];

fn imagekeeper(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_imagekeeper"))
        .args(args)
        .output()
        .expect("run imagekeeper")
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Exit 2, the name shown redacted, the secret nowhere in the output.
fn assert_refused(what: &str, out: &Output) {
    let shown = text(out);
    assert_eq!(out.status.code(), Some(2), "{what}: {shown}");
    assert!(shown.contains("REDACTED"), "{what}: {shown}");
    assert!(
        shown.contains("must not carry credentials"),
        "{what}: {shown}"
    );
    assert!(!shown.contains(SECRET), "{what}: {shown}");
}

/// Every `pins -o` format: exit 0, the secret nowhere.
fn assert_pins_clean(args: &[&str]) {
    for format in FORMATS {
        let mut all = vec!["pins", "-o", format];
        all.extend_from_slice(args);
        let out = imagekeeper(&all);
        let shown = text(&out);
        assert!(out.status.success(), "pins -o {format}: {shown}");
        assert!(!shown.contains(SECRET), "pins -o {format}: {shown}");
    }
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_with_credentials_is_refused_everywhere_and_its_secret_reaches_no_log_database_or_output()
 {
    let AgentFixture {
        fake,
        dir,
        db,
        socket,
    } = AgentFixture::builder()
        .image("sha256:aaa", "registry.example/model:1", 1000)
        .image_fs_used(3000)
        .db("db/records.redb")
        .socket("run/admin.sock")
        .start()
        .await;
    let log = dir.path().join("agent.log");
    let warm = dir.path().join("warm");
    std::fs::create_dir(&warm).expect("warm dir");
    let (db_arg, socket_arg, warm_arg) = (
        db.to_str().expect("utf8").to_owned(),
        socket.to_str().expect("utf8").to_owned(),
        warm.to_str().expect("utf8").to_owned(),
    );
    let at = |args: &[&str]| -> Vec<String> {
        let mut all: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        all.extend(["--db", &db_arg, "--admin-socket", &socket_arg].map(str::to_owned));
        all
    };
    let run_at = |args: &[&str]| {
        let all = at(args);
        imagekeeper(&all.iter().map(String::as_str).collect::<Vec<_>>())
    };

    // On the database directly (no agent yet): refused, nothing created.
    assert_refused("pin on the database", &run_at(&["pin", NAME]));
    assert!(!db.exists(), "a refused pin creates no database");

    // The warm entry at start and the config file: refused before anything is created.
    let warm_file = format!("warm:\n  - image: {NAME}\n");
    let bad_warm = dir.path().join("bad-warm");
    std::fs::create_dir(&bad_warm).expect("dir");
    std::fs::write(bad_warm.join("a.yaml"), &warm_file).expect("write");
    let bad_warm_arg = bad_warm.to_str().expect("utf8");
    assert_refused(
        "gc --dry-run with the warm entry",
        &run_at(&["gc", "--dry-run", "--warm-set-dir", bad_warm_arg]),
    );
    for (field, value) in [
        ("pinnedImages", format!("[\"{NAME}\"]")),
        ("podInfraContainerImage", format!("\"{NAME}\"")),
    ] {
        let config = dir.path().join("config.toml");
        std::fs::write(&config, format!("{field} = {value}\n")).expect("write");
        assert_refused(
            field,
            &run_at(&[
                "gc",
                "--dry-run",
                "--config",
                config.to_str().expect("utf8"),
            ]),
        );
    }
    assert_refused(
        "--pinned-image",
        &run_at(&["gc", "--dry-run", "--pinned-image", NAME]),
    );

    // The agent, its log to a file.
    let notify_dir = tempfile::tempdir().expect("temp dir");
    let notify_path = notify_dir.path().join("notify.sock");
    let notify = std::os::unix::net::UnixDatagram::bind(&notify_path).expect("bind notify");
    let endpoint = fake.endpoint();
    let mut args = at(&[
        "run",
        "--container-runtime-endpoint",
        &endpoint,
        "--gc-period",
        "1h",
        "--image-gc-high-threshold",
        "100",
        "--warm-set-dir",
        &warm_arg,
    ]);
    args.extend(["--kubelet-root-dir".to_owned(), String::new()]);
    let mut agent = Command::new(env!("CARGO_BIN_EXE_imagekeeper"))
        .args(&args)
        .env_remove("IMAGEKEEPER_LOG")
        .env("NOTIFY_SOCKET", &notify_path)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log file"))
        .spawn()
        .expect("spawn agent");
    let notify = tokio::task::spawn_blocking(move || {
        let first = next_notify(&notify);
        assert!(first.starts_with("READY=1"), "{first}");
        notify
    })
    .await
    .expect("join");

    // Through the agent: the CLI, and the admin call itself.
    let through = run_at(&["pin", NAME, "--reason", "x"]);
    assert_refused("pin through the agent", &through);
    let mut client = AdminClient::connect(&socket).await.expect("connect");
    let err = client
        .pin(PinKey::new(NAME, ""), UnixNanos::NEVER, String::new())
        .await
        .expect_err("the admin Pin call refuses it");
    let message = err.to_string();
    assert!(
        message.contains("REDACTED") && !message.contains(SECRET),
        "{message}"
    );
    // A good pin, so that every format has a row to print.
    let good = run_at(&["pin", "registry.example/model:1"]);
    assert!(good.status.success(), "{}", text(&good));
    assert_pins_clean(&at(&[]).iter().map(String::as_str).collect::<Vec<_>>());

    // A warm entry on a reload: refused into the log, redacted.
    std::fs::write(warm.join("a.yaml"), &warm_file).expect("write");
    // SAFETY: kill(2) on our own child's pid.
    let pid = i32::try_from(agent.id()).expect("pid");
    assert_eq!(unsafe { libc::kill(pid, libc::SIGHUP) }, 0);
    let status = tokio::task::spawn_blocking(move || {
        loop {
            let message = next_notify(&notify);
            if message.starts_with("READY=1") {
                return message;
            }
        }
    })
    .await
    .expect("join");
    assert!(
        status.contains("reload failed") && status.contains("REDACTED"),
        "{status}"
    );
    assert!(!status.contains(SECRET), "{status}");

    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let exit = tokio::task::spawn_blocking(move || agent.wait().expect("wait"))
        .await
        .expect("join");
    assert!(exit.success(), "{exit:?}");
    // On the database directly now.
    assert_pins_clean(&at(&[]).iter().map(String::as_str).collect::<Vec<_>>());

    let log_text = std::fs::read_to_string(&log).expect("log");
    assert!(
        log_text.contains("REDACTED"),
        "the reload's refusal is logged: {log_text}"
    );
    assert!(!log_text.contains(SECRET), "{log_text}");
    let db_bytes = std::fs::read(&db).expect("database");
    assert!(
        !contains(&db_bytes, SECRET),
        "the secret is in the database file"
    );
}

/// A database written before names with credentials were refused: `pins` shows the name
/// redacted in every format, and `unpin` removes it (showing it redacted).
#[test]
fn a_pin_with_credentials_from_an_older_agent_is_shown_redacted_and_can_be_removed() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("records.redb");
    {
        let store = Store::open(&db, UnixNanos(1)).expect("open");
        let mut batch = Batch::new();
        batch.put_pin(
            PinKey::new(NAME, ""),
            ImagePin {
                created_at: UnixNanos(1),
                until: UnixNanos::NEVER,
                reason: String::new(),
            },
        );
        store.apply(&batch).expect("pin");
    }
    let db_arg = db.to_str().expect("utf8");
    let socket = dir.path().join("none.sock");
    let socket_arg = socket.to_str().expect("utf8");
    assert_pins_clean(&["--db", db_arg, "--admin-socket", socket_arg]);
    let out = imagekeeper(&[
        "pins",
        "-o",
        "name",
        "--db",
        db_arg,
        "--admin-socket",
        socket_arg,
    ]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("REDACTED@127.0.0.1:5091/y:1"),
        "{}",
        text(&out)
    );
    let out = imagekeeper(&["unpin", NAME, "--db", db_arg, "--admin-socket", socket_arg]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(!text(&out).contains(SECRET), "{}", text(&out));
    let out = imagekeeper(&[
        "pins",
        "-o",
        "json",
        "--db",
        db_arg,
        "--admin-socket",
        socket_arg,
    ]);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "[]");
}
