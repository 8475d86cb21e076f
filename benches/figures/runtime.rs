//! The fake CRI runtime served from its own process: this bench binary run as a child
//! (`IMAGEKEEPER_BENCH_RUNTIME`) starts `cri::FakeRuntime` on a unix socket with a synthetic
//! node's images and containers, so an agent measured beside it decodes the real
//! `ListImagesResponse` through the real tonic client and its own RSS is its own alone. The
//! runtime lives until the bench closes its stdin.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};

use imagekeeper::cri::FakeRuntime;

use crate::synth::{SEED, synth_lists};

/// The environment variable that makes this bench binary the runtime child.
pub const RUNTIME_ENV: &str = "IMAGEKEEPER_BENCH_RUNTIME";
/// The image filesystem's mountpoint the runtime child reports, when set.
const RUNTIME_FS_ENV: &str = "IMAGEKEEPER_BENCH_RUNTIME_FS";

/// A fake runtime in its own process, serving the synthetic node of `n` images.
pub struct RuntimeProcess {
    child: Child,
    stdin: Option<ChildStdin>,
    pub socket: PathBuf,
    /// The encoded ListImagesResponse's size (the bytes the client decodes).
    pub response_bytes: u64,
    /// The containers it lists.
    pub containers: usize,
}

impl RuntimeProcess {
    /// Starts the runtime child for `synth_lists(n, SEED)` and waits until it serves.
    pub fn start(n: usize) -> RuntimeProcess {
        RuntimeProcess::start_on(n, None)
    }

    /// As [`RuntimeProcess::start`], with ImageFsInfo reporting `image_fs` as the image
    /// filesystem's mountpoint (by default the fake's own temp dir).
    pub fn start_on(n: usize, image_fs: Option<&Path>) -> RuntimeProcess {
        let exe = std::env::current_exe().expect("current exe");
        let mut command = Command::new(exe);
        if let Some(fs) = image_fs {
            command.env(RUNTIME_FS_ENV, fs);
        }
        let mut child = command
            .env(RUNTIME_ENV, n.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn the runtime child");
        let stdin = child.stdin.take();
        let mut ready = String::new();
        BufReader::new(child.stdout.take().expect("runtime stdout"))
            .read_line(&mut ready)
            .expect("the runtime child's ready line");
        let mut parts = ready.split_whitespace();
        let (Some(socket), Some(bytes), Some(containers)) =
            (parts.next(), parts.next(), parts.next())
        else {
            panic!("the runtime child did not start: {ready:?}");
        };
        RuntimeProcess {
            child,
            stdin,
            socket: PathBuf::from(socket),
            response_bytes: bytes.parse().expect("bytes"),
            containers: containers.parse().expect("containers"),
        }
    }

    /// `unix://<socket>`.
    pub fn endpoint(&self) -> String {
        format!("unix://{}", self.socket.display())
    }
}

impl Drop for RuntimeProcess {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.wait();
    }
}

/// The child: serves `synth_lists(n, SEED)` (the image filesystem: the fake's own temp dir,
/// a real directory, or `IMAGEKEEPER_BENCH_RUNTIME_FS`), prints `<socket> <response bytes> <containers>` and serves until its
/// stdin closes.
pub fn runtime_child(n: &str) {
    let n: usize = n.parse().expect("n");
    let (images, containers) = synth_lists(n, SEED);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("tokio");
    rt.block_on(async {
        let fake = FakeRuntime::start().await.expect("start the fake runtime");
        let count = containers.len();
        fake.set_images(images);
        fake.set_containers(containers);
        let mountpoint =
            std::env::var(RUNTIME_FS_ENV).unwrap_or_else(|_| fake.dir().display().to_string());
        fake.set_image_fs(mountpoint, 0);
        println!(
            "{} {} {count}",
            fake.socket_path().display(),
            fake.list_images_response_bytes()
        );
        tokio::task::spawn_blocking(|| {
            let mut rest = Vec::new();
            let _ = std::io::stdin().read_to_end(&mut rest);
        })
        .await
        .expect("wait for stdin");
        drop(fake);
    });
}
