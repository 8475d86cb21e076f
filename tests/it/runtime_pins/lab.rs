//! Runtime pins against the lab's real containerd (`scripts/cri-lab up --containerd R`), read
//! back through CRI ListImages by the test itself, never through imagekeeper's records. Each
//! test reads the release from lab.env (`CRI_LAB_CONTAINERD`) and asserts that release's
//! facts. On 1.7 and 2.1 a pin made through the running agent is `pinned: true` after one
//! cycle (`imagekeeper gc` through the agent returns after its cycle's reconcile), its expiry
//! and `unpin` make it `false`, a pin an operator set by hand and the sandbox image's stay, a
//! steady cycle writes no label (counted), a moved tag moves the pin, a present warm entry and
//! a side-loaded image are pinned, and after an agent restart and a containerd restart the
//! labelled names are exactly the keeps' names; `pins` and `inspect explain` say the same.
//! On 1.6 `auto` turns itself off: one log line, `imagekeeper_runtime_pins_enabled 0`, the
//! doctor's `not_checked`, no label written, nothing pinned.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use imagekeeper::cri::{
    CONTAINERD_CRI_NAMESPACE, ContainerdImages, CriClient, ImageRuntime, LabelledImage,
};

use crate::support::{self, Lab};

const OWN_LABEL: &str = "io.imagekeeper.pinned";
const PINNED_LABEL: &str = "io.cri-containerd.pinned";

/// The lab's containerd release (`CRI_LAB_CONTAINERD`; a lab.env without it is 1.6's).
fn release(lab: &Lab) -> String {
    lab.env_or("CRI_LAB_CONTAINERD", "1.6")
}

/// Whether the runtime pins are on for this release (all but 1.6: imagekeeper trusts
/// containerd 1.7.10 and later, containerd issue 9328).
fn release_carries_pins(lab: &Lab) -> bool {
    lab.containerd_release().pins()
}

/// The lab release's `ctr` in the CRI's namespace.
fn ctr(lab: &Lab) -> Command {
    lab.ctr()
}

/// `ctr images label NAME key=value` (an empty value removes the label), as an operator does.
fn label_by_hand(lab: &Lab, name: &str, label: &str) {
    let status = ctr(lab)
        .args(["images", "label", name, label])
        .stdout(Stdio::null())
        .status()
        .expect("run ctr");
    assert!(
        status.success(),
        "ctr images label {name} {label}: {status}"
    );
}

fn containerd_images(lab: &Lab) -> ContainerdImages {
    ContainerdImages::connect(
        &lab.endpoint,
        CONTAINERD_CRI_NAMESPACE,
        Duration::from_secs(5),
        Duration::from_secs(30),
    )
    .expect("the lab's endpoint is valid")
}

/// CRI ListImages' `pinned` of the image with id `id` (None: not listed).
async fn cri_pinned(client: &CriClient, id: &str) -> Option<bool> {
    client
        .list_images()
        .await
        .expect("ListImages")
        .into_iter()
        .find(|i| i.id.as_str() == id)
        .map(|i| i.pinned)
}

/// Waits until CRI ListImages lists the image `id` with `pinned == want`.
/// containerd's CRI plugin applies a label change when it handles containerd's image update
/// event, on its own task, so ListImages may lag the Update that `imagekeeper gc` waited for by
/// a moment: polled (another process's state, which no signal announces); the deadline only
/// turns a label containerd never applies into a failure.
async fn expect_pinned(client: &CriClient, id: &str, want: bool, what: &str) {
    support::wait_for(
        &format!("CRI ListImages to list {id} with pinned: {want} ({what})"),
        Duration::from_secs(10),
        || async { (cri_pinned(client, id).await == Some(want)).then_some(()) },
    )
    .await;
}

/// Asserts that, of the names in `scope` (those a test handles: other tests' images are not
/// its business), the ones carrying imagekeeper's label are exactly `want` (none lost, none
/// left behind), each with the pinned label.
async fn expect_labelled_names(lab: &Lab, scope: &[String], want: &[String], what: &str) {
    let labelled: Vec<LabelledImage> = own_labelled(&containerd_images(lab))
        .await
        .into_iter()
        .filter(|i| scope.contains(&i.name))
        .collect();
    let mut got: Vec<&str> = labelled.iter().map(|i| i.name.as_str()).collect();
    got.sort_unstable();
    let mut want: Vec<&str> = want.iter().map(String::as_str).collect();
    want.sort_unstable();
    assert_eq!(
        got,
        want,
        "containerd {}: the names imagekeeper labelled ({what})",
        release(lab)
    );
    for image in &labelled {
        assert_eq!(
            image.labels.get(PINNED_LABEL).map(String::as_str),
            Some("pinned"),
            "{} carries imagekeeper's label without the pinned one",
            image.name
        );
    }
}

/// `imagekeeper inspect explain -o json` on the agent's database (through the agent on its
/// socket when it answers): each image that says whether the runtime carries it, as
/// (image id, keep, runtime_pinned, runtime_pin_note).
fn explain_runtime_pins(
    dir: &Path,
    extra: &[&str],
) -> Vec<(String, String, serde_json::Value, String)> {
    let socket = dir.join("admin.sock");
    let db = dir.join("records.redb");
    let mut args = vec![
        "inspect",
        "--db",
        db.to_str().expect("utf8"),
        "-o",
        "json",
        "explain",
        "--kubelet-root-dir",
        "",
        "--admin-socket",
        socket.to_str().expect("utf8"),
    ];
    args.extend(extra);
    let out = support::bin::run(&args);
    assert!(
        out.status.success(),
        "inspect explain: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("explain JSON");
    doc["images"]
        .as_array()
        .expect("images")
        .iter()
        .filter(|i| i.get("keep").is_some())
        .map(|i| {
            (
                i["id"].as_str().unwrap_or_default().to_owned(),
                i["keep"].as_str().unwrap_or_default().to_owned(),
                i["runtime_pinned"].clone(),
                i["runtime_pin_note"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            )
        })
        .collect()
}

/// The names in containerd that carry imagekeeper's label.
async fn own_labelled(images: &ContainerdImages) -> Vec<LabelledImage> {
    images
        .list()
        .await
        .expect("containerd Images.List")
        .into_iter()
        .filter(|i| i.labels.contains_key(OWN_LABEL))
        .collect()
}

/// `imagekeeper run` against the lab: detect and GC every hour (the test drives the cycles
/// with `imagekeeper gc` through the agent, which returns after the cycle's label writes),
/// metrics on 127.0.0.1, its log in a file.
struct Agent {
    child: Child,
    dir: PathBuf,
    log: PathBuf,
}

impl Agent {
    fn start(lab: &Lab, dir: &Path, extra: &[&str]) -> Agent {
        let log = dir.join(format!(
            "agent-{}.log",
            std::fs::read_dir(dir).map_or(0, |d| d.count())
        ));
        let child = Command::new(env!("CARGO_BIN_EXE_imagekeeper"))
            .args(["run", "--container-runtime-endpoint", &lab.endpoint])
            .arg("--db")
            .arg(dir.join("records.redb"))
            .arg("--admin-socket")
            .arg(dir.join("admin.sock"))
            .args(["--detect-period", "1h", "--gc-period", "1h"])
            .args(["--metrics-address", "127.0.0.1:0"])
            .args(["--pod-infra-container-image", &lab.sandbox_image])
            .args(extra)
            .env_remove("IMAGEKEEPER_LOG")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("agent log"))
            .spawn()
            .expect("spawn agent");
        Agent {
            child,
            dir: dir.to_owned(),
            log,
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits for the start's first GC cycle (its log line: another process's write, no
    /// signal announces it) and returns the metrics address.
    async fn started(&self) -> String {
        support::wait_for(
            "the agent's first GC cycle",
            Duration::from_secs(60),
            || async {
                let log = self.log();
                log.contains("Image garbage collection")
                    .then(|| log.lines().find_map(support::metrics_address_in_log))
                    .flatten()
            },
        )
        .await
    }

    /// One cycle through the running agent: detect, GC, then the runtime pins' reconcile.
    fn cycle(&self) {
        let out = support::bin::run(&[
            "gc",
            "--admin-socket",
            self.dir.join("admin.sock").to_str().expect("utf8"),
            "--db",
            self.dir.join("records.redb").to_str().expect("utf8"),
        ]);
        assert!(
            out.status.success(),
            "imagekeeper gc: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// `imagekeeper pins -o json` (through the running agent when it answers): each pin's image
    /// with its `runtime_pinned` and `runtime_pin_note`.
    fn pins_json(&self) -> Vec<(String, serde_json::Value, String)> {
        Agent::pins_json_at(&self.dir)
    }

    fn pins_json_at(dir: &Path) -> Vec<(String, serde_json::Value, String)> {
        let socket = dir.join("admin.sock");
        let db = dir.join("records.redb");
        let out = support::bin::run(&[
            "pins",
            "-o",
            "json",
            "--admin-socket",
            socket.to_str().expect("utf8"),
            "--db",
            db.to_str().expect("utf8"),
        ]);
        assert!(
            out.status.success(),
            "imagekeeper pins: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("pins JSON");
        doc.as_array()
            .expect("a list")
            .iter()
            .map(|p| {
                (
                    p["key"]["image"].as_str().unwrap_or_default().to_owned(),
                    p["runtime_pinned"].clone(),
                    p["runtime_pin_note"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                )
            })
            .collect()
    }

    /// `imagekeeper doctor -o json` beside this agent (its admin socket and database, the lab's
    /// runtime and sandbox image): the `runtime-pins` finding.
    fn doctor_runtime_pins(&self, lab: &Lab) -> serde_json::Value {
        let kubelet = self.dir.join("kubelet.yaml");
        std::fs::write(
            &kubelet,
            format!(
                "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
                 containerRuntimeEndpoint: {}\n",
                lab.endpoint
            ),
        )
        .expect("kubelet config");
        let socket = self.dir.join("admin.sock");
        let db = self.dir.join("records.redb");
        let out = support::bin::run(&[
            "doctor",
            "--kubelet-config",
            kubelet.to_str().expect("utf8"),
            "--container-runtime-endpoint",
            &lab.endpoint,
            "--pod-infra-container-image",
            &lab.sandbox_image,
            "--admin-socket",
            socket.to_str().expect("utf8"),
            "--db",
            db.to_str().expect("utf8"),
            "-o",
            "json",
        ]);
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!("doctor JSON: {e}: {}", String::from_utf8_lossy(&out.stderr))
        });
        report["findings"]
            .as_array()
            .expect("findings")
            .iter()
            .find(|f| f["check"] == "runtime-pins")
            .cloned()
            .unwrap_or_else(|| panic!("no runtime-pins finding: {report:#}"))
    }

    /// `imagekeeper ARGS` through the agent (its socket and database); its stdout.
    fn cli(&self, args: &[&str]) -> Vec<u8> {
        let mut all: Vec<&str> = args.to_vec();
        let socket = self.dir.join("admin.sock");
        let db = self.dir.join("records.redb");
        all.extend(["--admin-socket", socket.to_str().expect("utf8")]);
        all.extend(["--db", db.to_str().expect("utf8")]);
        let out = support::bin::run(&all);
        assert!(
            out.status.success(),
            "imagekeeper {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    }

    /// `imagekeeper ARGS -o json` through the agent: the answer's JSON (one object).
    fn cli_json(&self, args: &[&str]) -> serde_json::Value {
        let mut all: Vec<&str> = args.to_vec();
        all.extend(["-o", "json"]);
        let doc: serde_json::Value = serde_json::from_slice(&self.cli(&all)).expect("JSON answer");
        match doc {
            serde_json::Value::Array(mut list) if list.len() == 1 => list.remove(0),
            other => other,
        }
    }

    fn kill(mut self) -> String {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.log()
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A fresh agent against the lab, in a temp dir the caller holds, once its first cycle ran,
/// with the cleanup of its labels and its metrics address: bound as
/// `let (_cleanup, _dir, agent, metrics)`, the agent is dropped (killed) first, then its dir,
/// then the labels go.
async fn started_agent(lab: &Lab) -> (Cleanup<'_>, tempfile::TempDir, Agent, String) {
    let cleanup = Cleanup {
        lab,
        by_hand: Vec::new(),
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let agent = Agent::start(lab, dir.path(), &[]);
    let metrics = agent.started().await;
    (cleanup, dir, agent, metrics)
}

/// Leaves containerd as the test found it, even when the test fails: imagekeeper's labels
/// removed with the documented command, the hand-made labels removed.
struct Cleanup<'a> {
    lab: &'a Lab,
    by_hand: Vec<String>,
}

impl Drop for Cleanup<'_> {
    fn drop(&mut self) {
        let _ = support::bin::run(&[
            "remove-runtime-pins",
            "--container-runtime-endpoint",
            &self.lab.endpoint,
        ]);
        for name in &self.by_hand {
            let _ = ctr(self.lab)
                .args(["images", "label", name, &format!("{PINNED_LABEL}=")])
                .stdout(Stdio::null())
                .status();
        }
    }
}

fn metric(metrics: &str, line_start: &str) -> Option<u64> {
    metrics
        .lines()
        .find(|l| l.starts_with(line_start))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

fn pin_writes(address: &str) -> u64 {
    let m = support::http_get(address, "/metrics");
    metric(
        &m,
        "imagekeeper_runtime_pin_label_writes_total{result=\"success\"}",
    )
    .unwrap_or_else(|| panic!("no label writes counter in {m}"))
}

#[tokio::test]
#[ignore = "needs the cri lab: scripts/cri-lab up, IMAGEKEEPER_LAB_ENV (scripts/test runs it)"]
async fn runtime_pins_on_1_7_and_2_1_follow_pin_expiry_and_unpin_spare_foreign_pins_and_write_nothing_when_steady_and_on_1_6_turn_themselves_off()
 {
    let lab = support::lab("runtime_pins_follow_pin_expiry_and_unpin").await;
    let client = lab.client().await;
    let busybox = lab.image("busybox:1.35").clone();
    let data = lab.image("data:5mb").clone();
    let operator = lab.image("user:uid").clone();
    for image in [&busybox, &data, &operator] {
        client
            .pull_image(&image.reference, "", None)
            .await
            .expect("pull");
    }
    client
        .pull_image(&lab.sandbox_image, "", None)
        .await
        .expect("pull the sandbox image");
    let sandbox_id = client
        .image_status(&lab.sandbox_image, "")
        .await
        .expect("ImageStatus")
        .expect("the sandbox image is present")
        .id;
    let _cleanup = Cleanup {
        lab: &lab,
        by_hand: vec![operator.reference.clone()],
    };
    // An operator's own pin, set by hand before the agent starts.
    label_by_hand(&lab, &operator.reference, &format!("{PINNED_LABEL}=pinned"));
    let dir = tempfile::tempdir().expect("temp dir");
    let agent = Agent::start(&lab, dir.path(), &[]);
    let metrics = agent.started().await;
    let carries = release_carries_pins(&lab);
    let enabled = metric(
        &support::http_get(&metrics, "/metrics"),
        "imagekeeper_runtime_pins_enabled ",
    );
    assert_eq!(
        enabled,
        Some(u64::from(carries)),
        "containerd {}: runtime pins must be {}",
        release(&lab),
        if carries {
            "on"
        } else {
            "off (auto turns itself off on 1.6)"
        }
    );

    // A cycle first (it returns after its reconcile): whatever the start had to label is
    // written before the count begins.
    agent.cycle();
    let writes_at_start = pin_writes(&metrics);
    agent.cli(&["pin", &busybox.reference, "--for", "4s", "--reason", "lab"]);
    agent.cli(&["pin", &data.reference]);
    let pinned_at = std::time::Instant::now();
    agent.cycle();
    expect_pinned(
        &client,
        &busybox.image_id,
        carries,
        &format!(
            "containerd {}: a pinned image is pinned: {carries} in CRI ListImages after one cycle",
            release(&lab)
        ),
    )
    .await;
    expect_pinned(&client, &data.image_id, carries, "").await;
    // `pins` through the running agent says the runtime carries each pin (on 1.6: why not).
    let views = agent.pins_json();
    assert_eq!(views.len(), 2, "{views:?}");
    for (image, pinned, note) in &views {
        if carries {
            assert_eq!(
                pinned,
                &serde_json::Value::Bool(true),
                "containerd {}: pins says the runtime carries {image} ({note})",
                release(&lab)
            );
        } else {
            assert!(
                pinned.is_null() && note.starts_with("runtime pins off: containerd 1.6"),
                "containerd {}: pins says runtime pins are off for {image}: {pinned} {note}",
                release(&lab)
            );
        }
    }
    // `inspect explain` through the agent says the same of each pinned image as `pins`.
    let explained = explain_runtime_pins(&agent.dir, &[]);
    for image in [&busybox, &data] {
        let (_, keep, pinned, note) = explained
            .iter()
            .find(|(id, ..)| id == &image.image_id)
            .unwrap_or_else(|| {
                panic!("explain says nothing of {}: {explained:?}", image.reference)
            });
        assert_eq!(keep, "pin", "{}", image.reference);
        if carries {
            assert_eq!(
                pinned,
                &serde_json::Value::Bool(true),
                "containerd {}: explain says the runtime carries {} ({note})",
                release(&lab),
                image.reference
            );
        } else {
            assert!(
                pinned.is_null() && note.starts_with("runtime pins off: containerd 1.6"),
                "containerd {}: explain says runtime pins are off for {}: {pinned} {note}",
                release(&lab),
                image.reference
            );
        }
    }
    // doctor reads CRI ListImages itself: every keep carried on 1.7/2.1; off on 1.6.
    let finding = agent.doctor_runtime_pins(&lab);
    if carries {
        assert_eq!(
            finding["status"],
            "ok",
            "containerd {}: doctor finds every keep carried: {finding:#}",
            release(&lab)
        );
        assert!(
            finding["message"]
                .as_str()
                .is_some_and(|m| m.contains("lists all")),
            "{finding:#}"
        );
    } else {
        assert_eq!(finding["status"], "not_checked", "{finding:#}");
        assert!(
            finding["message"].as_str().is_some_and(|m| m.contains(
                "the kubelet's image GC and eviction manager cannot see imagekeeper's keeps"
            )),
            "containerd 1.6: doctor says what runtime pins off means: {finding:#}"
        );
    }
    let labelled = own_labelled(&containerd_images(&lab)).await;
    if carries {
        // Every name containerd stores for the pinned image carries both labels.
        for name in [busybox.reference.clone(), busybox.by_digest()] {
            let image = labelled
                .iter()
                .find(|i| i.name == name)
                .unwrap_or_else(|| panic!("{name} carries no imagekeeper label: {labelled:?}"));
            assert_eq!(
                image.labels.get(PINNED_LABEL).map(String::as_str),
                Some("pinned")
            );
            assert_eq!(image.labels.get(OWN_LABEL).map(String::as_str), Some("pin"));
        }
    } else {
        assert!(
            labelled.is_empty(),
            "containerd 1.6: no label is written: {labelled:?}"
        );
    }

    // The counter counted the pin cycle's writes: one per name labelled (both labels in one
    // write; a CRI pull stores two names per image), none on 1.6. A steady cycle writes nothing.
    let before = pin_writes(&metrics);
    // Every name containerd stores for the two pinned images.
    let names = own_labelled(&containerd_images(&lab))
        .await
        .iter()
        .filter(|i| {
            [&busybox, &data]
                .iter()
                .any(|p| i.target_digest == p.manifest_digest)
        })
        .count() as u64;
    assert!(!carries || names >= 4, "{names} names labelled");
    assert_eq!(
        before - writes_at_start,
        if carries { names } else { 0 },
        "containerd {}: label writes counted by the pin cycle",
        release(&lab)
    );
    agent.cycle();
    assert_eq!(
        pin_writes(&metrics),
        before,
        "a steady cycle writes no label"
    );

    // The 4 s pin expires (real time passes; the cycle after it is the one that unpins).
    let left = Duration::from_secs(5).saturating_sub(pinned_at.elapsed());
    tokio::time::sleep(left).await;
    agent.cycle();
    expect_pinned(
        &client,
        &busybox.image_id,
        false,
        "an expired pin is unpinned",
    )
    .await;
    expect_pinned(&client, &data.image_id, carries, "the other pin stays").await;
    agent.cli(&["unpin", &data.reference]);
    agent.cycle();
    expect_pinned(&client, &data.image_id, false, "unpin unpins").await;

    // An image the operator labelled by hand (its tag), pinned and unpinned through
    // imagekeeper too: the hand-labelled name is carried already and never written (its other
    // names get imagekeeper's labels while the pin lasts, and lose them after), so the
    // operator's label outlives imagekeeper's keep.
    agent.cli(&["pin", &operator.reference]);
    agent.cycle();
    let tag_labels = |images: Vec<LabelledImage>| {
        images
            .into_iter()
            .find(|i| i.name == operator.reference)
            .map(|i| i.labels)
            .expect("the operator's tag is in containerd")
    };
    let during = tag_labels(containerd_images(&lab).list().await.expect("Images.List"));
    assert_eq!(
        during.get(PINNED_LABEL).map(String::as_str),
        Some("pinned"),
        "{during:?}"
    );
    assert!(
        !during.contains_key(OWN_LABEL),
        "imagekeeper wrote on a name pinned by hand: {during:?}"
    );
    agent.cli(&["unpin", &operator.reference]);
    agent.cycle();
    // Foreign pins: the operator's label and the sandbox image's stay.
    expect_pinned(
        &client,
        &operator.image_id,
        carries,
        &format!(
            "containerd {}: the operator's own label pins on 1.7 and 2.1 only",
            release(&lab)
        ),
    )
    .await;
    expect_pinned(
        &client,
        sandbox_id.as_str(),
        carries,
        &format!(
            "containerd {}: the sandbox image is pinned by containerd itself on 1.7 and 2.1",
            release(&lab)
        ),
    )
    .await;
    // Offline (no agent answers), `pins` reads the database and says it cannot know.
    let dir_path = agent.dir.clone();
    let log = agent.kill();
    let offline = Agent::pins_json_at(&dir_path);
    assert!(!offline.is_empty());
    let explained = explain_runtime_pins(
        &dir_path,
        &["--pod-infra-container-image", &lab.sandbox_image],
    );
    assert!(!explained.is_empty());
    for (id, _, pinned, note) in &explained {
        assert!(
            pinned.is_null() && note.contains("no running agent answered"),
            "offline explain of {id}: {pinned} {note}"
        );
    }
    for (image, pinned, note) in &offline {
        assert!(
            pinned.is_null() && note.contains("no running agent answered"),
            "offline pins of {image}: {pinned} {note}"
        );
    }
    let off_lines = log.matches("Runtime pins off").count();
    if carries {
        assert_eq!(off_lines, 0, "{log}");
        assert_eq!(log.matches("Runtime pins on").count(), 1, "{log}");
    } else {
        assert_eq!(
            off_lines, 1,
            "containerd 1.6: one log line says auto turned itself off\n{log}"
        );
    }
    // The operator's label is still there after the agent's whole run.
    let theirs = containerd_images(&lab)
        .get(&operator.reference)
        .await
        .expect("Images.Get")
        .expect("present");
    assert_eq!(
        theirs.labels.get(PINNED_LABEL).map(String::as_str),
        Some("pinned")
    );
    assert!(!theirs.labels.contains_key(OWN_LABEL));
}

#[tokio::test]
#[ignore = "needs the cri lab: scripts/cri-lab up, IMAGEKEEPER_LAB_ENV (scripts/test runs it)"]
async fn runtime_pins_move_with_a_moved_tag_and_match_the_keeps_after_agent_and_containerd_restarts_on_1_7_and_2_1_and_stay_unset_on_1_6()
 {
    let lab = support::lab("runtime_pins_move_with_a_moved_tag").await;
    // 1.7 and 2.1 list labelled images as pinned; on 1.6 `auto` is off: no label, nothing
    // pinned, through every step below.
    let carries = release_carries_pins(&lab);
    let client = lab.client().await;
    let first = lab.image("data:1mb").clone();
    let second = lab.image("data:20mb").clone();
    let kept = lab.image("user:name").clone();
    let moving = format!("{}/moving:tag", lab.image_prefix);
    let moving_at = |image: &support::LabImage| {
        format!("{}/moving@{}", lab.image_prefix, image.manifest_digest)
    };
    let push = |from: &str| {
        let status = Command::new("skopeo")
            .args([
                "--insecure-policy",
                "copy",
                "--quiet",
                "--src-tls-verify=false",
                "--dest-tls-verify=false",
            ])
            .arg(format!("docker://{from}"))
            .arg(format!("docker://{moving}"))
            .status()
            .expect("run skopeo");
        assert!(status.success(), "skopeo copy {from} {moving}: {status}");
    };
    let scope = vec![
        moving.clone(),
        moving_at(&first),
        moving_at(&second),
        kept.reference.clone(),
        kept.by_digest(),
    ];
    // Only the names this test labels may carry imagekeeper's label (on 1.7/2.1).
    let labelled = |names: Vec<String>| if carries { names } else { Vec::new() };
    push(&first.reference);
    client
        .pull_image(&moving, "", None)
        .await
        .expect("pull the tag");
    client
        .pull_image(&kept.reference, "", None)
        .await
        .expect("pull");
    let (_cleanup, dir, agent, _) = started_agent(&lab).await;
    agent.cli(&["pin", &moving, "--reason", "moves"]);
    agent.cli(&["pin", &kept.reference, "--for", "6s"]);
    let pinned_at = std::time::Instant::now();
    agent.cycle();
    expect_pinned(&client, &first.image_id, carries, "the tag's image").await;
    expect_labelled_names(
        &lab,
        &scope,
        &labelled(vec![
            moving.clone(),
            moving_at(&first),
            kept.reference.clone(),
            kept.by_digest(),
        ]),
        "both pins",
    )
    .await;
    // The tag moves to another image: the pin moves with it.
    push(&second.reference);
    client
        .pull_image(&moving, "", None)
        .await
        .expect("pull the moved tag");
    agent.cycle();
    expect_pinned(
        &client,
        &second.image_id,
        carries,
        "the tag's new image is pinned",
    )
    .await;
    expect_pinned(
        &client,
        &first.image_id,
        false,
        "the tag's old image is not",
    )
    .await;
    expect_labelled_names(
        &lab,
        &scope,
        &labelled(vec![
            moving.clone(),
            moving_at(&second),
            kept.reference.clone(),
            kept.by_digest(),
        ]),
        "the moved tag's pin on the new image's names only",
    )
    .await;

    // The tag moves back and forth, pulled through the agent (`imagekeeper pull --policy
    // Always`), with no cycle: containerd's CRI drops the moved name's labels at the pull, and
    // the agent labels it again before the pull answers (its detect period is 1 h here).
    // (The 6 s pin's names stay out of this check: it may expire during it.)
    let moving_scope = vec![moving.clone(), moving_at(&first), moving_at(&second)];
    for (now, before) in [(&first, &second), (&second, &first)] {
        push(&now.reference);
        agent.cli(&["pull", &moving, "--policy", "Always"]);
        expect_pinned(
            &client,
            &now.image_id,
            carries,
            "the tag's image, pulled through the agent",
        )
        .await;
        expect_pinned(&client, &before.image_id, false, "the tag's old image").await;
        expect_labelled_names(
            &lab,
            &moving_scope,
            &labelled(vec![moving.clone(), moving_at(now)]),
            "the tag moved by a pull through the agent",
        )
        .await;
    }

    // Agent restart: the 6 s pin expires while the agent is down; after the restart's first
    // cycle its labels are gone and the other pin's are still there.
    drop(agent.kill());
    tokio::time::sleep(Duration::from_secs(7).saturating_sub(pinned_at.elapsed())).await;
    let agent = Agent::start(&lab, dir.path(), &[]);
    agent.started().await;
    expect_pinned(&client, &kept.image_id, false, "none left behind").await;
    expect_pinned(&client, &second.image_id, carries, "none lost").await;
    expect_labelled_names(
        &lab,
        &scope,
        &labelled(vec![moving.clone(), moving_at(&second)]),
        "after the agent restart",
    )
    .await;

    // containerd restart under the agent: labels are containerd's own state and stay; keeps
    // changed after it are carried at the next cycle, both ways.
    lab.run_lab_script("restart-containerd");
    expect_pinned(
        &client,
        &second.image_id,
        carries,
        "kept across the containerd restart",
    )
    .await;
    expect_labelled_names(
        &lab,
        &scope,
        &labelled(vec![moving.clone(), moving_at(&second)]),
        "after the containerd restart, before a cycle",
    )
    .await;
    agent.cli(&["pin", &kept.reference]);
    agent.cli(&["unpin", &moving]);
    agent.cycle();
    expect_pinned(
        &client,
        &kept.image_id,
        carries,
        "pinned after the containerd restart",
    )
    .await;
    expect_pinned(
        &client,
        &second.image_id,
        false,
        "unpinned after the containerd restart",
    )
    .await;
    expect_labelled_names(
        &lab,
        &scope,
        &labelled(vec![kept.reference.clone(), kept.by_digest()]),
        "after the containerd restart and a cycle",
    )
    .await;
    let log = agent.kill();
    if !carries {
        assert_eq!(
            log.matches("Runtime pins off").count(),
            1,
            "containerd 1.6: one log line says auto turned itself off\n{log}"
        );
    }

    // The documented removal leaves no imagekeeper label and no pin of imagekeeper's.
    let out = support::bin::run(&[
        "remove-runtime-pins",
        "--container-runtime-endpoint",
        &lab.endpoint,
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    expect_labelled_names(&lab, &scope, &[], "after remove-runtime-pins").await;
    expect_pinned(&client, &kept.image_id, false, "").await;
    lab.remove_image(&moving).await;
}

#[tokio::test]
#[ignore = "needs the cri lab: scripts/cri-lab up, IMAGEKEEPER_LAB_ENV (scripts/test runs it)"]
async fn a_present_warm_entry_and_a_side_loaded_image_are_pinned_on_1_7_and_2_1_and_the_sandbox_stays_pinned_when_keeps_end_and_on_1_6_nothing_is()
 {
    let lab = support::lab("runtime_pins_warm_and_side_loaded").await;
    // 1.7 and 2.1 list labelled images (and the sandbox image) as pinned; 1.6 nothing.
    let carries = release_carries_pins(&lab);
    let client = lab.client().await;
    let warm = lab.image("data:5mb").clone();
    client
        .pull_image(&warm.reference, "", None)
        .await
        .expect("pull");
    client
        .pull_image(&lab.sandbox_image, "", None)
        .await
        .expect("pull the sandbox image");
    let sandbox_id = client
        .image_status(&lab.sandbox_image, "")
        .await
        .expect("status")
        .expect("present")
        .id;
    // A side-loaded image: imported with a tag and no repo digest.
    let dir = tempfile::tempdir().expect("temp dir");
    let side_name = format!("{}/side-loaded:1", lab.image_prefix);
    let source = lab.image("user:uid").clone();
    let tar = dir.path().join("image.tar");
    // Its content must not be listed with a repo digest by an earlier pull: removed first.
    lab.remove_image(&source.image_id).await;
    let status = Command::new("skopeo")
        .args(["copy", "--quiet", "--src-tls-verify=false"])
        .arg(format!("docker://{}", source.reference))
        .arg(format!("docker-archive:{}:{side_name}", tar.display()))
        .status()
        .expect("run skopeo");
    assert!(status.success());
    let status = ctr(&lab)
        .args(["images", "import"])
        .arg(&tar)
        .stdout(Stdio::null())
        .status()
        .expect("ctr");
    assert!(status.success(), "ctr images import: {status}");
    let _cleanup = Cleanup {
        lab: &lab,
        by_hand: Vec::new(),
    };
    let config = dir.path().join("config.toml");
    std::fs::write(
        &config,
        format!("[[warm]]\nimage = \"{}\"\n", warm.reference),
    )
    .expect("config");
    let agent = Agent::start(
        &lab,
        dir.path(),
        &[
            "--config",
            config.to_str().expect("utf8"),
            "--protect-irreplaceable=true",
        ],
    );
    agent.started().await;
    expect_pinned(
        &client,
        &warm.image_id,
        carries,
        &format!("containerd {}: a present warm entry", release(&lab)),
    )
    .await;
    expect_pinned(
        &client,
        &source.image_id,
        carries,
        &format!("containerd {}: a side-loaded image", release(&lab)),
    )
    .await;
    let labels = own_labelled(&containerd_images(&lab)).await;
    let why = |name: &str| {
        labels
            .iter()
            .find(|i| i.name == name)
            .and_then(|i| i.labels.get(OWN_LABEL).cloned())
    };
    let (warm_why, side_why) = if carries {
        (Some("warm"), Some("no-repo-digest"))
    } else {
        (None, None)
    };
    assert_eq!(why(&warm.reference).as_deref(), warm_why);
    assert_eq!(why(&side_name).as_deref(), side_why);
    // `inspect explain` through the agent: the warm entry (which the file alone cannot show)
    // and the side-loaded image, each with why it is kept and whether the runtime carries it:
    // what CRI ListImages listed at the agent's last detect, so one cycle after the labels.
    agent.cycle();
    let explained = explain_runtime_pins(dir.path(), &[]);
    for (image, keep) in [(&warm, "warm"), (&source, "no-repo-digest")] {
        let (_, got_keep, pinned, note) = explained
            .iter()
            .find(|(id, ..)| id == &image.image_id)
            .unwrap_or_else(|| panic!("explain says nothing of {keep}: {explained:?}"));
        assert_eq!(got_keep, keep);
        if carries {
            assert_eq!(pinned, &serde_json::Value::Bool(true), "{keep}: {note}");
        } else {
            assert!(
                pinned.is_null() && note.starts_with("runtime pins off"),
                "{keep}: {pinned} {note}"
            );
        }
    }
    drop(agent.kill());
    // imagekeeper drops every keep: no warm set, irreplaceable images not protected.
    let agent = Agent::start(&lab, dir.path(), &["--protect-irreplaceable=false"]);
    agent.started().await;
    expect_pinned(&client, &warm.image_id, false, "").await;
    expect_pinned(&client, &source.image_id, false, "").await;
    expect_pinned(
        &client,
        sandbox_id.as_str(),
        carries,
        &format!(
            "containerd {}: containerd's own sandbox pin (1.7, 2.1) stays",
            release(&lab)
        ),
    )
    .await;
    assert!(own_labelled(&containerd_images(&lab)).await.is_empty());
    drop(agent.kill());
    lab.remove_image(&side_name).await;
}

/// A pin must not wait for the next cycle: with detect and GC an hour apart, a pin through
/// the running agent is listed `pinned: true` by CRI ListImages (what the kubelet's image GC
/// and its DeleteUnusedImages, every 10 s under pressure, read) the moment `pin` answers, and
/// its answer names the image (pulled after the agent's last look) and says so; the check runs
/// right after `pin` returns, with no wait. `unpin` takes the runtime's pin away without a
/// cycle. On 1.6 (no runtime pins) the answer says why the runtime cannot carry it.
#[tokio::test]
#[ignore = "needs the cri lab: scripts/cri-lab up, IMAGEKEEPER_LAB_ENV (scripts/test runs it)"]
async fn a_pin_through_the_agent_is_pinned_in_cri_list_images_when_pin_answers_and_unpin_unpins_it_when_unpin_answers()
 {
    let lab =
        support::lab("runtime_pins::lab::a_pin_through_the_agent_is_pinned_when_pin_answers").await;
    let client = lab.client().await;
    let data = lab.image("data:1mb").clone();
    lab.remove_image(&data.reference).await;
    let (_cleanup, _dir, agent, metrics) = started_agent(&lab).await;
    // Pulled once the agent's image cache (refreshed every 30 s) holds the runtime's list, so
    // that neither a detect nor that cache has seen it: the pin's answer must still name it.
    support::wait_for(
        "the agent's image cache filled (imagekeeper_runtime_images)",
        Duration::from_secs(60),
        || async {
            metric(
                &support::http_get(&metrics, "/metrics"),
                "imagekeeper_runtime_images ",
            )
        },
    )
    .await;
    client
        .pull_image(&data.reference, "", None)
        .await
        .expect("pull");
    let carries = release_carries_pins(&lab);
    assert_eq!(
        cri_pinned(&client, &data.image_id).await,
        Some(false),
        "nothing pins {} before the pin",
        data.reference
    );

    let answer = agent.cli_json(&["pin", &data.reference, "--for", "1h", "--reason", "lab"]);
    // At once: no cycle ran since the pin (the next is an hour away).
    assert_eq!(
        cri_pinned(&client, &data.image_id).await,
        Some(carries),
        "containerd {}: CRI ListImages lists the image pinned: {carries} when `pin` answers ({answer})",
        release(&lab)
    );
    assert_eq!(
        answer["image_ids"],
        serde_json::json!([data.image_id]),
        "the pin's answer names the image the runtime lists now: {answer}"
    );
    if carries {
        assert_eq!(
            answer["runtime_pinned"],
            serde_json::Value::Bool(true),
            "containerd {}: the pin's answer says the runtime carries it: {answer}",
            release(&lab)
        );
    } else {
        assert!(
            answer["runtime_pinned"].is_null()
                && answer["runtime_pin_note"]
                    .as_str()
                    .is_some_and(|n| n.starts_with("runtime pins off")),
            "containerd {}: the pin's answer says runtime pins are off: {answer}",
            release(&lab)
        );
    }

    agent.cli(&["unpin", &data.reference]);
    if carries {
        // containerd's CRI plugin applies the label's removal from its own event handler a
        // moment after the Update that `unpin` waited for (see `expect_pinned`).
        expect_pinned(
            &client,
            &data.image_id,
            false,
            "unpin through the agent takes the runtime's pin away without a cycle",
        )
        .await;
    }
    assert!(
        !agent.log().contains("panicked"),
        "the agent's log: {}",
        agent.log()
    );
}
