//! `inspect disk` against the lab's real containerd (`scripts/cri-lab up`): what the CRI does
//! not show, made with the release's own `ctr` and measured with `du`, is named with its size.
//!
//! Made: an orphaned snapshot (`ctr snapshots prepare`, no container, as a tool that prepares
//! a root filesystem and is gone; 3 MiB written into its upper directory), another namespace's
//! image (`ctr -n imagekeeper-disk-lab images pull`), a blob ingested with no image (`ctr
//! content ingest`, 2 MiB), an expired lease (created with a `containerd.io/gc.expire` in the
//! past: ctr cannot give a lease resources, so it holds nothing), a lease in force holding a
//! snapshot (`ctr images mount --rw`, 1 MiB written through the mount), and a running CRI
//! container that wrote 1 MiB. Compared: each snapshot's row with `du -sB1` of its upper
//! directory (the path containerd's own `ctr snapshots mounts` prints), the blob's with `du`
//! of its file in the content store, the other namespace's image with the growth of `du` of
//! containerd's root across its pull (its metadata's growth is the tolerance). containerd's
//! listings of every namespace are the same before and after `inspect disk`. Then `prune
//! --orphans` through the agent removes the orphan and the blob (checked with `du` and `ctr`),
//! keeps everything else, and journals both removals; without the agent, the command removes a
//! second orphan and journals it in the same database itself.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use imagekeeper::cri::ImageRuntime;
use serde_json::Value;

use crate::support::{self, Lab, bin};

mod agent_prune;

const OTHER_NS: &str = "imagekeeper-disk-lab";
const MIB: u64 = 1024 * 1024;

/// The lab release's `ctr` on the lab's socket in namespace `ns`.
fn ctr(lab: &Lab, ns: &str) -> Command {
    let bin = lab.env_or("CRI_LAB_CONTAINERD_BIN", "/usr/bin");
    let mut command = Command::new(Path::new(&bin).join("ctr"));
    command
        .arg("--address")
        .arg(lab.dir.join("containerd/containerd.sock"))
        .args(["-n", ns])
        .stderr(Stdio::piped());
    command
}

/// Runs `ctr -n ns args`, panicking with its stderr on failure; returns stdout.
fn run_ctr(lab: &Lab, ns: &str, args: &[&str]) -> String {
    let out = ctr(lab, ns).args(args).output().expect("run ctr");
    assert!(
        out.status.success(),
        "ctr -n {ns} {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `du -sB1 path`: the bytes the path's files take on disk.
fn du(path: &Path) -> u64 {
    let out = Command::new("du")
        .arg("-sB1")
        .arg(path)
        .output()
        .expect("run du");
    assert!(out.status.success(), "du {}", path.display());
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("du {} printed no number", path.display()))
}

/// The upper directory of an active snapshot, as `ctr snapshots mounts` prints it.
fn upperdir(lab: &Lab, ns: &str, key: &str) -> PathBuf {
    let mount = run_ctr(lab, ns, &["snapshots", "mounts", "/mnt", key]);
    let upper = mount
        .split([',', ' '])
        .find_map(|part| part.strip_prefix("upperdir="))
        .unwrap_or_else(|| panic!("no upperdir in {mount:?}"));
    PathBuf::from(upper)
}

fn write_random(path: &Path, bytes: u64) {
    let data: Vec<u8> = (0..bytes).map(|_| fastrand::u8(..)).collect();
    std::fs::write(path, data).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
}

/// An agent on the lab's containerd with its database, admin socket and notify socket in
/// `dir`, metrics on loopback, no probe listener (the DaemonSet's default port is the deploy
/// lab pod's), runtime pins and the space pass off (high threshold 100), the disk accounting
/// every minute, and `extra` settings (`KEY=VALUE`). The notify socket lives as long as the
/// returned guard.
fn spawn_disk_agent(
    lab: &Lab,
    dir: &Path,
    extra: &[&str],
) -> (
    crate::support::agent::AgentChild,
    std::os::unix::net::UnixDatagram,
) {
    let notify = dir.join("notify.sock");
    let guard = std::os::unix::net::UnixDatagram::bind(&notify).expect("bind notify");
    let mut args = vec![
        "--metrics-address",
        "127.0.0.1:0",
        "--healthz-address=",
        "--image-gc-high-threshold",
        "100",
        "--set",
        "runtimePins=off",
        "--set",
        "diskAccountingPeriod=1m",
    ];
    for setting in extra {
        args.extend(["--set", setting]);
    }
    let agent = crate::support::agent::AgentChild::spawn(
        &lab.endpoint,
        &dir.join("records.redb"),
        &dir.join("admin.sock"),
        notify.to_str().expect("utf8"),
        &args,
    );
    (agent, guard)
}

/// The agent's metrics at `metrics`, scraped every 200 ms until `done` holds of the text
/// (panics naming `what` after `deadline`).
async fn scrape_until(
    metrics: &str,
    what: &str,
    deadline: std::time::Duration,
    done: impl Fn(&str) -> bool,
) -> String {
    let done = &done;
    support::wait_for(what, deadline, || {
        let metrics = metrics.to_owned();
        async move {
            let text = tokio::task::spawn_blocking(move || support::http_get(&metrics, "/metrics"))
                .await
                .expect("scrape");
            if done(&text) {
                return Some(text);
            }
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            None
        }
    })
    .await
}

/// `inspect evictions --db DB --reason orphan -o json`, which must succeed: the journal's
/// orphan entries.
fn orphan_journal(db: &Path) -> Value {
    let out = bin::run(&[
        "inspect",
        "evictions",
        "--db",
        &db.display().to_string(),
        "--reason",
        "orphan",
        "-o",
        "json",
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("inspect evictions -o json")
}

/// Every namespace's images, snapshots, content, leases and containers, as ctr lists them.
fn listings(lab: &Lab) -> String {
    let mut out = String::new();
    for ns in run_ctr(lab, "default", &["namespaces", "ls", "-q"]).lines() {
        for what in [
            &["images", "ls"][..],
            &["snapshots", "ls"],
            &["content", "ls"],
            &["leases", "ls"],
            &["containers", "ls"],
        ] {
            out.push_str(&format!("== {ns} {}\n", what.join(" ")));
            // Ages ("2 minutes") change with time: keep the columns that do not.
            let text = run_ctr(lab, ns, what);
            for line in text.lines() {
                let kept: Vec<&str> = line
                    .split_whitespace()
                    .filter(|w| w.contains(':') || w.contains('/') || w.contains('='))
                    .collect();
                out.push_str(&kept.join(" "));
                out.push('\n');
            }
        }
    }
    out
}

/// Removes what the test made, whatever happened (errors ignored: some may not exist).
struct Cleanup<'a> {
    lab: &'a Lab,
    mount: PathBuf,
    orphan: String,
    /// The second orphan, which `prune --orphans` removes without an agent.
    orphan2: String,
    blob: Option<String>,
    image: String,
}

impl Drop for Cleanup<'_> {
    fn drop(&mut self) {
        let quiet = |ns: &str, args: &[&str]| {
            let _ = ctr(self.lab, ns)
                .args(args)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        };
        let mount = self.mount.display().to_string();
        quiet("k8s.io", &["images", "unmount", "--rm", &mount]);
        quiet("k8s.io", &["leases", "rm", &mount]);
        quiet("k8s.io", &["snapshots", "rm", &self.orphan]);
        quiet("k8s.io", &["snapshots", "rm", &self.orphan2]);
        quiet("k8s.io", &["leases", "rm", "imagekeeper-disk-lab-expired"]);
        if let Some(blob) = &self.blob {
            quiet("k8s.io", &["content", "rm", blob]);
        }
        quiet(OTHER_NS, &["images", "rm", &self.image]);
        // A lease deleted with --sync runs containerd's garbage collection to its end: the
        // namespace is empty after it, and can go.
        for ns in [OTHER_NS, "k8s.io"] {
            quiet(
                ns,
                &[
                    "leases",
                    "create",
                    "--expires",
                    "0",
                    "--id",
                    "imagekeeper-disk-lab-gc",
                ],
            );
            quiet(ns, &["leases", "rm", "--sync", "imagekeeper-disk-lab-gc"]);
        }
        quiet("default", &["namespaces", "rm", OTHER_NS]);
        let _ = std::fs::remove_dir(&self.mount);
    }
}

fn row<'a>(report: &'a Value, kind: &str, ns: &str, name: &str) -> &'a Value {
    report["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .find(|r| r["kind"] == kind && r["namespace"] == ns && r["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} row {ns}/{name} in {report:#}"))
}

fn bytes(row: &Value) -> u64 {
    row["bytes"].as_u64().expect("bytes")
}

/// `a` within `tolerance` of `b`.
fn close(what: &str, a: u64, b: u64, tolerance: u64) {
    assert!(
        a.abs_diff(b) <= tolerance,
        "{what}: inspect disk says {a}, du says {b} (tolerance {tolerance})"
    );
    println!("{what}: inspect disk {a} bytes, du {b} bytes");
}

#[tokio::test]
#[ignore = "needs the cri lab: scripts/cri-lab up, IMAGEKEEPER_LAB_ENV (scripts/test runs it)"]
async fn inspect_disk_names_what_the_cri_does_not_show_with_its_du_size_and_changes_nothing() {
    let lab = support::lab(
        "disk::lab::inspect_disk_names_what_the_cri_does_not_show_with_its_du_size_and_changes_nothing",
    )
    .await;
    let root = lab
        .imagefs_root
        .clone()
        .expect("lab.env names containerd's root (CRI_LAB_IMAGEFS_ROOT)");
    let client = lab.client().await;
    let busybox = lab.image("busybox:1.35").reference.clone();
    let data = lab.image("data:1mb").reference.clone();
    client
        .pull_image(&busybox, "", None)
        .await
        .expect("pull busybox");
    let pid = std::process::id();
    let mut cleanup = Cleanup {
        lab: &lab,
        mount: lab.dir.join(format!("disk-lab-mount-{pid}")),
        orphan: format!("imagekeeper-disk-lab-orphan-{pid}"),
        orphan2: format!("imagekeeper-disk-lab-orphan2-{pid}"),
        blob: None,
        image: data.clone(),
    };

    // A running CRI container that wrote 1 MiB.
    let (_pod, container) = support::run_in_new_pod(
        &lab,
        &client,
        "disk-lab",
        &support::sleeper("writer", &busybox),
    )
    .await;
    let wrote = client
        .exec_sync(
            &container,
            &[
                "sh".into(),
                "-c".into(),
                "head -c 1048576 /dev/urandom > /tmp/written".into(),
            ],
            std::time::Duration::from_secs(30),
        )
        .await
        .expect("exec in the container");
    assert_eq!(
        wrote.exit_code,
        0,
        "{}",
        String::from_utf8_lossy(&wrote.stderr)
    );

    // Another namespace's image, and what its pull grew containerd's root by.
    let before_pull = du(&root);
    run_ctr(&lab, OTHER_NS, &["images", "pull", "--plain-http", &data]);
    let pull_grew = du(&root).saturating_sub(before_pull);

    // The pull's lease was deleted: containerd collects garbage now. Wait for that collection
    // to end (a lease deleted with --sync), so it cannot take the unreferenced blob below.
    run_ctr(
        &lab,
        "k8s.io",
        &[
            "leases",
            "create",
            "--expires",
            "0",
            "--id",
            "imagekeeper-disk-lab-gc",
        ],
    );
    run_ctr(
        &lab,
        "k8s.io",
        &["leases", "rm", "--sync", "imagekeeper-disk-lab-gc"],
    );

    // An orphaned snapshot on busybox's top layer, with 3 MiB written into it.
    let parent = run_ctr(&lab, "k8s.io", &["snapshots", "ls"])
        .lines()
        .find(|l| l.ends_with("Committed") || l.trim_end().ends_with("Committed"))
        .and_then(|l| l.split_whitespace().next().map(str::to_owned))
        .expect("a committed snapshot in k8s.io");
    run_ctr(
        &lab,
        "k8s.io",
        &["snapshots", "prepare", &cleanup.orphan, &parent],
    );
    let orphan_upper = upperdir(&lab, "k8s.io", &cleanup.orphan);
    write_random(&orphan_upper.join("written"), 3 * MIB);

    // A 2 MiB blob ingested with no image.
    let blob_file = lab.dir.join(format!("disk-lab-blob-{pid}"));
    write_random(&blob_file, 2 * MIB);
    let ingest = ctr(&lab, "k8s.io")
        .args(["content", "ingest", &format!("imagekeeper-disk-lab-{pid}")])
        .stdin(std::fs::File::open(&blob_file).expect("the blob file"))
        .output()
        .expect("run ctr content ingest");
    assert!(
        ingest.status.success(),
        "{}",
        String::from_utf8_lossy(&ingest.stderr)
    );
    let sum = Command::new("sha256sum")
        .arg(&blob_file)
        .output()
        .expect("run sha256sum");
    let _ = std::fs::remove_file(&blob_file);
    let hex = String::from_utf8_lossy(&sum.stdout)
        .split_whitespace()
        .next()
        .expect("a digest")
        .to_owned();
    let digest = format!("sha256:{hex}");
    cleanup.blob = Some(digest.clone());

    // Leases: one expired (a past containerd.io/gc.expire), one in force holding the
    // snapshot `ctr images mount --rw` makes, 1 MiB written through the mount.
    run_ctr(
        &lab,
        "k8s.io",
        &[
            "leases",
            "create",
            "--expires",
            "0",
            "--id",
            "imagekeeper-disk-lab-expired",
            "containerd.io/gc.expire=2020-01-01T00:00:00Z",
        ],
    );
    std::fs::create_dir_all(&cleanup.mount).expect("the mount dir");
    let mount = cleanup.mount.display().to_string();
    run_ctr(
        &lab,
        "k8s.io",
        &["images", "mount", "--rw", &busybox, &mount],
    );
    write_random(&cleanup.mount.join("written"), MIB);

    let listed_before = listings(&lab);
    let started = Instant::now();
    let out = bin::run(&[
        "inspect",
        "disk",
        "--container-runtime-endpoint",
        &lab.endpoint,
        "-o",
        "json",
    ]);
    let took = started.elapsed();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        listings(&lab),
        listed_before,
        "inspect disk changed containerd's state"
    );
    let report: Value = serde_json::from_slice(&out.stdout).expect("inspect disk -o json");

    let orphan = row(&report, "orphanSnapshot", "k8s.io", &cleanup.orphan);
    close(
        "orphaned snapshot",
        bytes(orphan),
        du(&orphan_upper),
        64 * 1024,
    );
    assert!(bytes(orphan) >= 3 * MIB);
    assert_eq!(
        orphan["gcRoot"], true,
        "ctr snapshots prepare labels it gc.root"
    );
    assert_eq!(orphan["snapshotKind"], "active");
    assert_eq!(orphan["parentChain"][0], parent.as_str());

    let other = report["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .find(|r| r["kind"] == "image" && r["namespace"] == OTHER_NS)
        .unwrap_or_else(|| panic!("no image row in {OTHER_NS}: {report:#}"));
    assert!(
        other["names"]
            .as_array()
            .expect("names")
            .iter()
            .any(|n| n == data.as_str()),
        "{other}"
    );
    // The pull also grew containerd's databases: a few pages of meta.db and metadata.db.
    close(
        "another namespace's image",
        bytes(other),
        pull_grew,
        256 * 1024,
    );

    let blob = row(&report, "unreferencedBlob", "k8s.io", &digest);
    let blob_path = root
        .join("io.containerd.content.v1.content/blobs/sha256")
        .join(&hex);
    close("unreferenced blob", bytes(blob), du(&blob_path), 0);
    assert_eq!(blob["sizeBytes"], 2 * MIB);
    assert_eq!(blob["gcRoot"], false);

    let expired = row(&report, "lease", "k8s.io", "imagekeeper-disk-lab-expired");
    assert_eq!(expired["state"], "expired");
    assert_eq!(bytes(expired), 0, "it holds nothing");
    let leased = row(&report, "lease", "k8s.io", &mount);
    assert_eq!(leased["state"], "active");
    close(
        "a lease's snapshot",
        bytes(leased),
        du(&upperdir(&lab, "k8s.io", &mount)),
        64 * 1024,
    );
    assert!(bytes(leased) >= MIB);

    let running = row(&report, "criContainer", "k8s.io", &container);
    assert_eq!(running["state"], "running");
    close(
        "a running container's writable layer",
        bytes(running),
        du(&upperdir(&lab, "k8s.io", &container)),
        64 * 1024,
    );
    assert!(bytes(running) >= MIB);

    let used = report["filesystem"]["usedBytes"]
        .as_u64()
        .expect("usedBytes");
    let unexplained = report["unexplainedBytes"]
        .as_i64()
        .expect("unexplainedBytes");
    let percent = report["unexplainedPercent"]
        .as_f64()
        .expect("unexplainedPercent");
    println!(
        "containerd {}: inspect disk took {took:?}; filesystem used {used} bytes, accounted {}, \
         unexplained {unexplained} bytes ({percent:.3} %), {} inodes",
        lab.env_or("CRI_LAB_CONTAINERD_VERSION", "?"),
        report["accountedBytes"],
        report["unexplainedInodes"],
    );
    // containerd's root is the lab's own tmpfs: nothing but containerd writes there.
    assert!(
        percent.abs() < 1.0,
        "unexplained {percent} % of the usage: {report:#}"
    );

    // prune --orphans --dry-run plans the orphan and the blob (k8s.io), nothing an image, a
    // container or a lease holds, nothing of the other namespace, and changes nothing.
    let out = bin::run(&[
        "prune",
        "--orphans",
        "--dry-run",
        "--min-age",
        "0s",
        "--container-runtime-endpoint",
        &lab.endpoint,
        "--db",
        &lab.dir.join("disk-lab-none.redb").display().to_string(),
        "-o",
        "json",
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        listings(&lab),
        listed_before,
        "prune --orphans --dry-run changed containerd"
    );
    let plan: Value = serde_json::from_slice(&out.stdout).expect("prune --orphans -o json");
    let planned: Vec<(&str, &str)> = plan["removals"]
        .as_array()
        .expect("removals")
        .iter()
        .map(|r| {
            (
                r["kind"].as_str().unwrap_or(""),
                r["name"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert!(
        planned.contains(&("orphanSnapshot", cleanup.orphan.as_str())),
        "{plan:#}"
    );
    assert!(
        planned.contains(&("unreferencedBlob", digest.as_str())),
        "{plan:#}"
    );
    for held in [container.as_str(), mount.as_str()] {
        assert!(
            planned.iter().all(|(_, name)| *name != held),
            "{held} planned: {plan:#}"
        );
    }
    assert!(
        plan["removals"]
            .as_array()
            .expect("removals")
            .iter()
            .all(|r| r["namespace"] == "k8s.io"),
        "{plan:#}"
    );

    // The agent's disk accounting (diskAccountingPeriod): the same split as metrics. Runtime
    // pins off and the space pass off (high threshold 100): it changes nothing either.
    let agent_dir = tempfile::tempdir().expect("temp dir");
    let (mut agent, _notify) = spawn_disk_agent(&lab, agent_dir.path(), &[]);
    let metrics = agent.metrics_address().await;
    let scraped = scrape_until(
        &metrics,
        "the agent's first disk accounting (imagekeeper_disk_bytes)",
        std::time::Duration::from_secs(60),
        |text| text.contains("imagekeeper_disk_bytes{"),
    )
    .await;
    let gauge = |owner: &str| -> u64 {
        let prefix = format!("imagekeeper_disk_bytes{{owner=\"{owner}\"}} ");
        scraped
            .lines()
            .find_map(|l| l.strip_prefix(prefix.as_str()))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {prefix} in\n{scraped}"))
    };
    let total = |kind: &str| -> u64 {
        report["totals"]
            .as_array()
            .expect("totals")
            .iter()
            .find(|t| t["kind"] == kind)
            .and_then(|t| t["bytes"].as_u64())
            .unwrap_or_else(|| panic!("no {kind} total in {report:#}"))
    };
    for kind in ["orphanSnapshot", "unreferencedBlob", "image"] {
        assert_eq!(
            gauge(kind),
            total(kind),
            "{kind}: the agent's metric and inspect disk"
        );
    }
    assert!(
        gauge("unexplained") < used / 100 + 1,
        "unexplained under 1 % of {used}:\n{scraped}"
    );
    assert_eq!(
        listings(&lab),
        listed_before,
        "the agent's accounting changed containerd"
    );

    // `inspect disk --agent`: the agent's accounting through its admin socket, the same split.
    let out = bin::run(&[
        "inspect",
        "disk",
        "--agent",
        "--admin-socket",
        &agent_dir.path().join("admin.sock").display().to_string(),
        "-o",
        "json",
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let through_agent: Value = serde_json::from_slice(&out.stdout).expect("inspect disk --agent");
    for kind in ["orphanSnapshot", "unreferencedBlob", "image"] {
        let agent_total = through_agent["totals"]
            .as_array()
            .expect("totals")
            .iter()
            .find(|t| t["kind"] == kind)
            .and_then(|t| t["bytes"].as_u64())
            .unwrap_or_else(|| panic!("no {kind} total in {through_agent:#}"));
        assert_eq!(
            agent_total,
            total(kind),
            "{kind}: inspect disk --agent and here"
        );
    }
    assert_eq!(
        row(&through_agent, "orphanSnapshot", "k8s.io", &cleanup.orphan)["bytes"],
        row(&report, "orphanSnapshot", "k8s.io", &cleanup.orphan)["bytes"]
    );

    prune_orphans_through_the_agent(
        &lab,
        &root,
        &agent_dir.path().join("admin.sock"),
        &agent_dir.path().join("records.redb"),
        Made {
            orphan: &cleanup.orphan,
            orphan_upper: &orphan_upper,
            digest: &digest,
            blob_path: &blob_path,
            container: &container,
            mount: &mount,
        },
    );
    drop(agent);

    // Without an agent (it stopped: its socket answers no more), the command opens the
    // database itself: a second orphan goes, journaled beside the agent's two entries.
    run_ctr(
        &lab,
        "k8s.io",
        &["snapshots", "prepare", &cleanup.orphan2, &parent],
    );
    let upper2 = upperdir(&lab, "k8s.io", &cleanup.orphan2);
    write_random(&upper2.join("written"), MIB);
    let db = agent_dir.path().join("records.redb").display().to_string();
    let out = bin::run(&[
        "prune",
        "--orphans",
        "--min-age",
        "0s",
        "--container-runtime-endpoint",
        &lab.endpoint,
        "--admin-socket",
        &agent_dir.path().join("admin.sock").display().to_string(),
        "--db",
        &db,
        "-o",
        "json",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("ran through containerd and the database directly"),
        "{stderr}"
    );
    let report: Value = serde_json::from_slice(&out.stdout).expect("prune --orphans -o json");
    assert!(
        report["removals"]
            .as_array()
            .expect("removals")
            .iter()
            .any(|r| r["name"] == cleanup.orphan2.as_str() && r["result"] == "removed"),
        "{report:#}"
    );
    assert!(!upper2.exists(), "the second orphan's directory is freed");
    let journal = orphan_journal(&agent_dir.path().join("records.redb"));
    let ids: Vec<&str> = journal
        .as_array()
        .expect("entries")
        .iter()
        .filter_map(|e| e["id"].as_str())
        .collect();
    assert!(
        ids.iter()
            .any(|id| id.ends_with(&format!("/{}", cleanup.orphan2))),
        "{ids:?}"
    );
    assert!(ids.len() >= 3, "the agent's two entries stay: {ids:?}");
    drop(cleanup);
}

/// What the test made that `prune --orphans` must remove or keep.
struct Made<'a> {
    orphan: &'a str,
    orphan_upper: &'a Path,
    digest: &'a str,
    blob_path: &'a Path,
    container: &'a str,
    mount: &'a str,
}

/// `prune --orphans --min-age 0s` through the running agent (it holds the database the
/// removals are journaled in): the orphaned snapshot and the blob go, their bytes freed (`du`)
/// and gone from containerd's own listing; the running container's snapshot, the lease's, every
/// CRI image (the pinned sandbox image among them) and the other namespace's image stay; the
/// journal lists both removals with their sizes.
fn prune_orphans_through_the_agent(
    lab: &Lab,
    root: &Path,
    admin: &Path,
    db: &Path,
    made: Made<'_>,
) {
    let k8s_images = run_ctr(lab, "k8s.io", &["images", "ls"]);
    assert!(
        k8s_images.contains("io.cri-containerd.pinned=pinned"),
        "a pinned image in k8s.io: {k8s_images}"
    );
    let other_images = run_ctr(lab, OTHER_NS, &["images", "ls", "-q"]);
    // The blob is collectable: the removal of the orphan before it makes containerd collect
    // garbage, which may take the blob first (the prune then skips it: gone by its re-check).
    // A gc.root label keeps it for the prune alone to remove.
    run_ctr(
        lab,
        "k8s.io",
        &[
            "content",
            "label",
            made.digest,
            "containerd.io/gc.root=imagekeeper-disk-lab",
        ],
    );
    let before = du(root);
    let orphan_bytes = du(made.orphan_upper);
    let out = bin::run(&[
        "prune",
        "--orphans",
        "--min-age",
        "0s",
        "--container-runtime-endpoint",
        &lab.endpoint,
        "--admin-socket",
        &admin.display().to_string(),
        "-o",
        "json",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("ran through the running agent"), "{stderr}");
    let report: Value = serde_json::from_slice(&out.stdout).expect("prune --orphans -o json");
    println!("prune --orphans: {report:#}");
    assert_eq!(report["dryRun"], false);
    assert_eq!(report["failed"], 0, "{report:#}");
    let rows = report["removals"].as_array().expect("removals");
    let removed = |kind: &str, name: &str| -> &Value {
        rows.iter()
            .find(|r| r["kind"] == kind && r["name"] == name)
            .unwrap_or_else(|| panic!("no {kind} {name} in {report:#}"))
    };
    let orphan = removed("orphanSnapshot", made.orphan);
    let blob = removed("unreferencedBlob", made.digest);
    for row in [orphan, blob] {
        assert_eq!(row["result"], "removed", "{row}");
        assert_eq!(row["namespace"], "k8s.io", "{row}");
    }
    for held in [made.container, made.mount] {
        assert!(rows.iter().all(|r| r["name"] != held), "{held}: {report:#}");
    }

    // Gone from containerd's own listing, and from the disk.
    let snapshots = run_ctr(lab, "k8s.io", &["snapshots", "ls"]);
    assert!(!snapshots.contains(made.orphan), "{snapshots}");
    for held in [made.container, made.mount] {
        assert!(snapshots.contains(held), "{held} kept: {snapshots}");
    }
    let content = run_ctr(lab, "k8s.io", &["content", "ls", "-q"]);
    assert!(!content.contains(made.digest), "{content}");
    assert!(
        !made.orphan_upper.exists(),
        "the orphan's directory is freed"
    );
    assert!(!made.blob_path.exists(), "the blob's file is freed");
    let freed = before.saturating_sub(du(root));
    println!(
        "prune --orphans freed {freed} bytes of containerd's root (du); the orphan's upper \
         directory was {orphan_bytes} bytes, the blob {} bytes",
        2 * MIB
    );
    assert!(
        freed + 64 * 1024 >= orphan_bytes + 2 * MIB,
        "du of containerd's root fell by {freed} bytes only"
    );

    // What must stay, stayed.
    let tasks = run_ctr(lab, "k8s.io", &["tasks", "ls"]);
    assert!(
        tasks
            .lines()
            .any(|l| l.contains(made.container) && l.contains("RUNNING")),
        "the container runs: {tasks}"
    );
    assert_eq!(run_ctr(lab, "k8s.io", &["images", "ls"]), k8s_images);
    assert_eq!(
        run_ctr(lab, OTHER_NS, &["images", "ls", "-q"]),
        other_images
    );

    // The journal lists both removals, reason orphan, by imagekeeper, with their sizes.
    let journal = orphan_journal(db);
    let snapshotter = orphan["snapshotter"].as_str().expect("a snapshotter");
    for (id, row) in [
        (
            format!("snapshot:k8s.io/{snapshotter}/{}", made.orphan),
            orphan,
        ),
        (format!("blob:k8s.io/{}", made.digest), blob),
    ] {
        let entry = journal
            .as_array()
            .expect("entries")
            .iter()
            .find(|e| e["id"] == id.as_str())
            .unwrap_or_else(|| panic!("no journal entry {id}: {journal:#}"));
        assert_eq!(entry["reason"], "orphan", "{entry}");
        assert_eq!(entry["remover"], "imagekeeper", "{entry}");
        assert_eq!(entry["size"], row["bytes"], "{entry}");
    }
}
