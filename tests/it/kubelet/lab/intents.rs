//! The kubelet's KEP-2535 pull intents, as the real kubelet v1.37.2 writes them, on containerd
//! 2.3 (`kubelet::lab::intents::...`). Kubelet master pkg/kubelet/images/pullmanager/
//! image_pull_manager.go: `RecordPullIntent` writes `<root>/image_manager/pulling/sha256-<sha256
//! of the image name>` before every pull; `RecordImagePulled` (success) and
//! `RecordImagePullFailed` (failure) delete it when the pull ends, so in a running kubelet an
//! intent lives exactly as long as its pull (only a kubelet stopped mid-pull leaves one, which
//! its next start turns into a pulled record when the runtime lists that exact name).
//!
//! The test makes a pull that hangs: a registry of its own inside the lab's namespace accepts
//! connections and never answers, and containerd's `certs.d` sends it plain HTTP, which has no
//! response deadline. The image name it pulls is already present (a second tag of `data:5mb`),
//! with `imagePullPolicy: Always`, so the intent names an image the runtime lists. What
//! imagekeeper does with that real file: its GC keeps the image (the kubelet is pulling it),
//! `inspect explain` (offline, no runtime) says it cannot tell which image the name is, and once
//! the intent is older than `kubeletIntentMaxAge` `doctor` reports it stale and GC no
//! longer keeps the image. When the pull fails the kubelet deletes the intent.

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, SystemTime};

use imagekeeper::kubelet::record_file_name;
use imagekeeper::store::Store;

use super::super::{KubeletLab, StaticPod, kubelet_lab};
use super::{POD_START, image_id, reference, remove_all_images_but_the_sandbox};
use crate::support::{self, bin};

/// A registry whose pulls never end, inside the lab's namespace; its `certs.d` entry makes
/// containerd speak plain HTTP to it. It answers a manifest's HEAD at once (so the name
/// resolves, to a digest that exists nowhere) and every GET with its headers only: the body
/// never comes. containerd 2.3 gives up on a request whose response headers have not come in
/// 60 s ("net/http: timeout awaiting response headers", seen here), 2.1 did not: a registry
/// that answered nothing ended the kubelet's pull before its intent was a minute old. A body
/// that never comes is bounded only by the CRI's pull progress timeout (5 minutes by
/// default). Killed (its connections closed: the pull fails) and the entry removed when
/// dropped.
struct HangingRegistry {
    child: Child,
    port: u16,
    hosts_dir: PathBuf,
}

/// The hanging registry's program (python3, in the lab's namespace).
const HANGING_REGISTRY: &str = "import socket, threading
s = socket.socket()
s.bind(('127.0.0.1', 0))
s.listen(64)
print(s.getsockname()[1], flush=True)
held = []
head = ('HTTP/1.1 200 OK\\r\\n'
        'Content-Type: application/vnd.oci.image.manifest.v1+json\\r\\n'
        'Docker-Content-Digest: sha256:' + '0' * 64 + '\\r\\n'
        'Content-Length: 512\\r\\n\\r\\n').encode()
def serve(c):
    held.append(c)
    buf = b''
    while True:
        data = c.recv(65536)
        if not data:
            return
        buf += data
        while b'\\r\\n\\r\\n' in buf:
            request, buf = buf.split(b'\\r\\n\\r\\n', 1)
            c.sendall(head)
            if not request.startswith(b'HEAD '):
                return
while True:
    c = s.accept()[0]
    threading.Thread(target=serve, args=(c,), daemon=True).start()
";

impl HangingRegistry {
    fn start(kl: &KubeletLab) -> HangingRegistry {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/kubelet-lab");
        let mut child = Command::new(&script)
            .args(["exec", "python3", "-c", HANGING_REGISTRY])
            .env("CRI_LAB_DIR", &kl.lab.dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the hanging registry");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("its port");
        let port: u16 = line.trim().parse().expect("a port");
        let host = format!("127.0.0.1:{port}");
        let hosts_dir = kl.lab.dir.join("containerd/certs.d").join(&host);
        std::fs::create_dir_all(&hosts_dir).expect("mkdir certs.d entry");
        std::fs::write(
            hosts_dir.join("hosts.toml"),
            format!(
                "server = \"http://{host}\"\n\n[host.\"http://{host}\"]\n  capabilities = [\"pull\", \"resolve\"]\n"
            ),
        )
        .expect("hosts.toml");
        HangingRegistry {
            child,
            port,
            hosts_dir,
        }
    }

    /// Ends every pull from it: the held connections close.
    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for HangingRegistry {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.hosts_dir);
    }
}

/// `imagekeeper gc` once against the lab's runtime with the kubelet's records, asking for
/// everything unused to go; extra flags appended.
fn gc_everything(kl: &KubeletLab, db: &Path, dir: &Path, extra: &[&str]) {
    let mut args = vec![
        "gc".to_owned(),
        "--db".to_owned(),
        db.display().to_string(),
        "--container-runtime-endpoint".to_owned(),
        kl.env("KUBELET_LAB_ENDPOINT"),
        "--kubelet-root-dir".to_owned(),
        kl.root_dir().display().to_string(),
        "--image-gc-high-threshold".to_owned(),
        "1".to_owned(),
        "--image-gc-low-threshold".to_owned(),
        "0".to_owned(),
        "--minimum-image-ttl-duration".to_owned(),
        "0s".to_owned(),
        "--admin-socket".to_owned(),
        dir.join("none.sock").display().to_string(),
    ];
    args.extend(extra.iter().map(|a| (*a).to_owned()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = bin::run(&args);
    // Exit 0, or 1 when it could not free enough (every image left is kept): both ran the walk.
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "imagekeeper gc: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The image ids imagekeeper's journal says it removed.
fn journal(db: &Path) -> Vec<String> {
    Store::open_read_only(db)
        .expect("open read-only")
        .journal()
        .expect("journal")
        .into_iter()
        .map(|(key, _)| key.key.image_id.0.clone())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the kubelet lab: scripts/kubelet-lab up, IMAGEKEEPER_KUBELET_LAB_ENV (scripts/test runs it)"]
async fn the_real_kubelets_pull_intent_keeps_its_image_from_imagekeepers_gc_while_the_pull_runs_turns_stale_in_doctor_and_is_deleted_when_the_pull_fails()
 {
    let mut kl = kubelet_lab("kubelet::lab::intents").await;
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("records.redb");
    remove_all_images_but_the_sandbox(&kl);
    let (named_id, other_id) = (image_id(&kl, "data:5mb"), image_id(&kl, "data:1mb"));
    kl.crictl(&["pull", &reference(&kl, "data:5mb")]);
    kl.crictl(&["pull", &reference(&kl, "data:1mb")]);
    let mut registry = HangingRegistry::start(&kl);
    // The name the pod pulls: a second tag of data:5mb, on the hanging registry.
    let name = format!("127.0.0.1:{}/imagekeeper-lab/data:5mb", registry.port);
    let ctr = Path::new(&kl.lab.env("CRI_LAB_CONTAINERD_BIN")).join("ctr");
    let out = Command::new(&ctr)
        .args([
            "--address",
            &kl.lab.env("CONTAINERD_ADDRESS"),
            "-n",
            "k8s.io",
        ])
        .args(["images", "tag", &reference(&kl, "data:5mb"), &name])
        .output()
        .expect("ctr runs");
    assert!(
        out.status.success(),
        "ctr images tag: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let intent = kl
        .root_dir()
        .join("image_manager/pulling")
        .join(record_file_name(&name));
    assert!(!intent.exists(), "no intent before the pull");

    kl.add_static_pod(&StaticPod {
        name: "intents",
        image: &name,
        command: &["sleep", "3600"],
        pull_policy: "Always",
    });
    // Polled: the kubelet writes the file when its pod worker reaches the pull.
    let text = support::wait_for("the kubelet's pull intent file", POD_START, || async {
        std::fs::read_to_string(&intent).ok()
    })
    .await;
    let written = std::fs::metadata(&intent)
        .and_then(|m| m.modified())
        .expect("the intent's mtime");
    println!("{}: {text}", intent.display());
    let json: serde_json::Value = serde_json::from_str(&text).expect("the intent is JSON");
    assert_eq!(json["kind"], "ImagePullIntent", "{text}");
    assert_eq!(
        json["apiVersion"], "kubelet.config.k8s.io/v1beta1",
        "{text}"
    );
    assert_eq!(json["image"], name.as_str(), "{text}");
    let (line, _) = kl
        .wait_for_log_line(&["Pulling image", &name], 0, POD_START)
        .await;
    println!("{line}");

    // (1) While the pull runs, imagekeeper's GC keeps the image the intent names (a tag of
    // data:5mb: resolved through the runtime's tags) and removes the other unused image.
    gc_everything(&kl, &db, dir.path(), &[]);
    let removed = journal(&db);
    assert!(removed.contains(&other_id), "GC ran: {removed:?}");
    assert!(
        !removed.contains(&named_id),
        "the image the kubelet is pulling stays: {removed:?}"
    );
    assert!(kl.crictl_image_ids().contains(&named_id));
    assert!(intent.exists(), "the pull still runs");

    // (2) `inspect explain` reads the intent but, with no runtime, cannot tell which image the
    // name is: it says so.
    let out = bin::run(&[
        "inspect",
        "explain",
        "--db",
        db.to_str().expect("utf8"),
        "--kubelet-root-dir",
        kl.root_dir().to_str().expect("utf8"),
        "--capacity",
        "1000000000",
        "--available",
        "1000",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("the kubelet is pulling {name:?}")),
        "{stderr}"
    );

    // (3) Older than kubeletIntentMaxAge (1m, its least): doctor reports it stale and
    // GC no longer keeps the image. Time passes here (not an ordering).
    let age = SystemTime::now()
        .duration_since(written)
        .unwrap_or_default();
    if age < Duration::from_secs(62) {
        tokio::time::sleep(Duration::from_secs(62) - age).await;
    }
    assert!(intent.exists(), "the pull still runs after a minute");
    let out = bin::run(&[
        "doctor",
        "--kubelet-config",
        kl.config_file().to_str().expect("utf8"),
        "--kubelet-config-dir",
        kl.config_dir().to_str().expect("utf8"),
        "--container-runtime-endpoint",
        &kl.env("KUBELET_LAB_ENDPOINT"),
        "--kubelet-root-dir",
        kl.root_dir().to_str().expect("utf8"),
        "--set",
        "kubeletIntentMaxAge=1m",
        "-o",
        "json",
    ]);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|err| {
        panic!(
            "doctor printed JSON: {err}: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let finding = report["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .find(|f| f["check"] == "kubelet-pull-intents")
        .cloned()
        .unwrap_or_else(|| panic!("a kubelet-pull-intents finding: {report}"));
    let message = finding["message"].as_str().expect("a message");
    assert!(
        message.contains("1 kubelet pull intent(s) are older than kubeletIntentMaxAge")
            && message.contains(&name),
        "{finding}"
    );
    gc_everything(&kl, &db, dir.path(), &["--set", "kubeletIntentMaxAge=1m"]);
    let removed = journal(&db);
    assert!(
        removed.contains(&named_id),
        "a stale intent keeps nothing: {removed:?}"
    );

    // (4) The pull fails (the registry goes): the kubelet deletes the intent.
    kl.remove_static_pod("intents");
    registry.stop();
    support::wait_for(
        "the kubelet to delete its pull intent",
        Duration::from_secs(60),
        || async { (!intent.exists()).then_some(()) },
    )
    .await;
    for line in kl
        .log()
        .lines()
        .filter(|l| l.contains("Failed to pull image"))
    {
        println!("{line}");
    }
    kl.pod_gone("intents", POD_START).await;
    let out = bin::run(&[
        "doctor",
        "--kubelet-config",
        kl.config_file().to_str().expect("utf8"),
        "--kubelet-config-dir",
        kl.config_dir().to_str().expect("utf8"),
        "--container-runtime-endpoint",
        &kl.env("KUBELET_LAB_ENDPOINT"),
        "--kubelet-root-dir",
        kl.root_dir().to_str().expect("utf8"),
        "--set",
        "kubeletIntentMaxAge=1m",
        "-o",
        "json",
    ]);
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        report.contains("no kubelet pull intent is older than kubeletIntentMaxAge"),
        "{report}"
    );
}
