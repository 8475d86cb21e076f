//! The agent's node for the agent and service tests, and the agent as a process: one
//! fixture ([`AgentFixture`]: the in-process fake CRI server with the test's images, a temp
//! dir with the database and admin socket paths), one way to spawn `imagekeeper run` against
//! it, one child handle, one read of the service manager's messages, and the runtime image
//! those tests script.
//!
//! Invariants: the spawned agent logs at info whatever the caller's `IMAGEKEEPER_LOG` ("Serving
//! metrics" names the bound address), its stderr is piped for [`AgentChild::metrics_address`],
//! its GC loop waits an hour (a test drives GC itself), and it is killed and reaped on drop.
//! The 60 s read deadlines only turn a hang into a failure; no test waits on them.

use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

use imagekeeper::cri::FakeRuntime;
use imagekeeper::model::{ImageId, RuntimeImage};

use super::metrics_address_from_stderr;

/// An image as the fake runtime lists it: one tag, a size, and a repo digest (a pulled
/// image, so `protectIrreplaceable`, on by default, does not keep it).
pub fn image(id: &str, tag: &str, size: u64) -> RuntimeImage {
    let repo = tag.rsplit_once(':').map_or(tag, |(repo, _)| repo);
    RuntimeImage {
        id: ImageId::new(id),
        repo_tags: vec![tag.to_owned()],
        repo_digests: vec![format!("{repo}@sha256:{}", "0".repeat(64))],
        size,
        ..RuntimeImage::default()
    }
}

/// A node for one agent test (and for the doctor's, monitoring's and the damaged-database
/// tests' runtime, which use only the parts they need): the fake CRI server (`fake`, with the test's images and image
/// filesystem) and a temp dir (`dir`) holding the agent's database (`db`) and admin socket
/// (`socket`), neither created yet. Tests destructure it (`let AgentFixture { fake, dir, db,
/// socket } = ...`) and use the parts as they used their own.
pub struct AgentFixture {
    pub fake: FakeRuntime,
    pub dir: tempfile::TempDir,
    pub db: PathBuf,
    pub socket: PathBuf,
}

/// The knobs the agent tests vary; [`AgentFixtureBuilder::start`] builds the node.
#[must_use]
pub struct AgentFixtureBuilder {
    images: Vec<RuntimeImage>,
    image_fs_used: Option<u64>,
    db: &'static str,
    socket: &'static str,
}

impl AgentFixture {
    /// No images, no image filesystem, the database at `records.redb` and the admin socket
    /// at `admin.sock` in the temp dir.
    pub fn builder() -> AgentFixtureBuilder {
        AgentFixtureBuilder {
            images: Vec::new(),
            image_fs_used: None,
            db: "records.redb",
            socket: "admin.sock",
        }
    }
}

impl AgentFixtureBuilder {
    /// One more image the fake lists ([`image`]: one tag, a size, a repo digest).
    pub fn image(mut self, id: &str, tag: &str, size: u64) -> Self {
        self.images.push(image(id, tag, size));
        self
    }

    /// More images the fake lists, as given.
    pub fn images(mut self, images: impl IntoIterator<Item = RuntimeImage>) -> Self {
        self.images.extend(images);
        self
    }

    /// The fake's image filesystem: its temp dir (statvfs'd for real) with `used` bytes used.
    pub fn image_fs_used(mut self, used: u64) -> Self {
        self.image_fs_used = Some(used);
        self
    }

    /// The database's path in the temp dir (default `records.redb`).
    pub fn db(mut self, relative: &'static str) -> Self {
        self.db = relative;
        self
    }

    /// The admin socket's path in the temp dir (default `admin.sock`).
    pub fn socket(mut self, relative: &'static str) -> Self {
        self.socket = relative;
        self
    }

    /// Starts the fake (with the images, if any, and the image filesystem, if set) and makes
    /// the temp dir.
    pub async fn start(self) -> AgentFixture {
        let fake = FakeRuntime::start().await.expect("fake runtime");
        if !self.images.is_empty() {
            fake.set_images(self.images);
        }
        if let Some(used) = self.image_fs_used {
            fake.set_image_fs(fake.dir().display().to_string(), used);
        }
        let dir = tempfile::tempdir().expect("temp dir");
        let db = dir.path().join(self.db);
        let socket = dir.path().join(self.socket);
        AgentFixture {
            fake,
            dir,
            db,
            socket,
        }
    }
}

/// A spawned `imagekeeper run`, killed and reaped on drop if still alive.
pub struct AgentChild {
    pub child: Child,
}

impl Drop for AgentChild {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl AgentChild {
    /// `imagekeeper run --container-runtime-endpoint ENDPOINT --db DB --admin-socket SOCKET
    /// --gc-period 1h EXTRA...` with `NOTIFY_SOCKET` set to `notify_socket` (a path or
    /// `@name`).
    pub fn spawn(
        endpoint: &str,
        db: &Path,
        socket: &Path,
        notify_socket: &str,
        extra: &[&str],
    ) -> AgentChild {
        let child = Command::new(env!("CARGO_BIN_EXE_imagekeeper"))
            .args([
                "run",
                "--container-runtime-endpoint",
                endpoint,
                "--db",
                db.to_str().expect("utf8"),
                "--admin-socket",
                socket.to_str().expect("utf8"),
                "--gc-period",
                "1h",
            ])
            .args(extra)
            // Info logs ("Serving metrics" names the bound address) whatever the caller's filter.
            .env_remove("IMAGEKEEPER_LOG")
            .env("NOTIFY_SOCKET", notify_socket)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn agent");
        AgentChild { child }
    }

    pub fn pid(&self) -> i32 {
        i32::try_from(self.child.id()).expect("pid fits i32")
    }

    pub fn signal(&self, signal: i32) {
        // SAFETY: kill(2) on our own child's pid.
        assert_eq!(unsafe { libc::kill(self.pid(), signal) }, 0, "kill");
    }

    /// The metrics address the agent bound (started with `--metrics-address 127.0.0.1:0`), from
    /// its "Serving metrics" log line; its stderr is drained from then on.
    pub async fn metrics_address(&mut self) -> String {
        let stderr = self
            .child
            .stderr
            .take()
            .expect("the agent's stderr, piped and unread");
        metrics_address_from_stderr(stderr, Duration::from_secs(60)).await
    }

    pub fn wait(&mut self) -> ExitStatus {
        self.child.wait().expect("wait")
    }

    /// Waits for the agent's exit (a blocking wait(2), no polling); a watchdog kills it after
    /// `deadline`, only against a hang, and the test then fails.
    pub fn wait_within(&mut self, deadline: Duration) -> ExitStatus {
        let pid = self.pid();
        let (exited, exited_rx) = std::sync::mpsc::channel::<()>();
        let watchdog = std::thread::spawn(move || {
            if exited_rx.recv_timeout(deadline).is_err() {
                // SAFETY: kill(2) on our own child, not reaped yet (wait below reaps it).
                unsafe { libc::kill(pid, libc::SIGKILL) };
                return true;
            }
            false
        });
        let status = self.wait();
        let _ = exited.send(());
        let killed = watchdog.join().expect("watchdog");
        assert!(!killed, "the agent did not exit within {deadline:?}");
        status
    }
}

/// The next datagram on the service manager's side of `NOTIFY_SOCKET` (a deadline only
/// against a hang).
pub fn next_notify(socket: &UnixDatagram) -> String {
    socket
        .set_read_timeout(Some(Duration::from_secs(60)))
        .expect("read timeout");
    let mut buf = [0u8; 4096];
    let n = socket.recv(&mut buf).expect("a notify message within 60 s");
    String::from_utf8_lossy(&buf[..n]).into_owned()
}
