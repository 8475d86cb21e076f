//! Runtime pins against the lab's real containerd (`scripts/cri-lab up --containerd R`), read
//! back through CRI ListImages by the test itself, never through imagekeeper's records. On
//! 1.7 and 2.1 a pin made through the running agent is `pinned: true` after one cycle (`imagekeeper
//! gc` through the agent returns after its cycle's reconcile), its expiry and `unpin` make it
//! `false`, a pin an operator set by hand and the sandbox image's stay, a steady cycle writes no
//! label, a moved tag moves the pin, a side-loaded image is pinned, and after an agent restart
//! and a containerd restart the labels match the keeps. On 1.6 `auto` turns itself off: one log
//! line, `imagekeeper_runtime_pins_enabled 0`, no label written, nothing pinned.

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

/// Whether this release lists labelled images as pinned (1.7 and 2.1; 1.6 never sets it).
fn release_carries_pins(lab: &Lab) -> bool {
    release(lab) != "1.6"
}

/// The lab release's `ctr` (its bin dir from lab.env, else the system's).
fn ctr(lab: &Lab) -> Command {
    let bin = lab.env_or("CRI_LAB_CONTAINERD_BIN", "/usr/bin");
    let mut c = Command::new(Path::new(&bin).join("ctr"));
    c.arg("--address")
        .arg(lab.dir.join("containerd/containerd.sock"))
        .args(["-n", "k8s.io"]);
    c
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

/// Waits until CRI ListImages lists the image `id` with `pinned == want`, then asserts it.
/// containerd's CRI plugin applies a label change when it handles containerd's image update
/// event, on its own task, so ListImages may lag the Update that `imagekeeper gc` waited for by
/// a moment: polled (another process's state, which no signal announces); the deadline only
/// turns a label containerd never applies into a failure.
async fn expect_pinned(client: &CriClient, id: &str, want: bool, what: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let got = cri_pinned(client, id).await;
        if got == Some(want) || std::time::Instant::now() > deadline {
            assert_eq!(got, Some(want), "CRI ListImages pinned of {id}: {what}");
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
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

    fn cli(&self, args: &[&str]) {
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
async fn runtime_pins_on_1_7_and_2_1_follow_pin_expiry_and_unpin_spare_foreign_pins_and_write_nothing_when_steady_and_on_1_6_turn_themselves_off()
 {
    let Some(lab) = support::lab("runtime_pins_follow_pin_expiry_and_unpin").await else {
        return;
    };
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

    // A steady cycle writes nothing.
    let before = pin_writes(&metrics);
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
async fn on_1_7_and_2_1_runtime_pins_move_with_a_moved_tag_and_match_the_keeps_after_agent_and_containerd_restarts()
 {
    let Some(lab) = support::lab("runtime_pins_move_with_a_moved_tag").await else {
        return;
    };
    if !release_carries_pins(&lab) {
        println!("containerd 1.6 lists nothing as pinned: the 1.6 behaviour is the first test's");
        return;
    }
    let client = lab.client().await;
    let first = lab.image("data:1mb").clone();
    let second = lab.image("data:20mb").clone();
    let kept = lab.image("user:name").clone();
    let moving = format!("{}/moving:tag", lab.image_prefix);
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
    push(&first.reference);
    client
        .pull_image(&moving, "", None)
        .await
        .expect("pull the tag");
    client
        .pull_image(&kept.reference, "", None)
        .await
        .expect("pull");
    let _cleanup = Cleanup {
        lab: &lab,
        by_hand: Vec::new(),
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let agent = Agent::start(&lab, dir.path(), &[]);
    agent.started().await;
    agent.cli(&["pin", &moving, "--reason", "moves"]);
    agent.cli(&["pin", &kept.reference, "--for", "6s"]);
    let pinned_at = std::time::Instant::now();
    agent.cycle();
    expect_pinned(&client, &first.image_id, true, "").await;
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
        true,
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

    // Agent restart: the 6 s pin expires while the agent is down; after the restart's first
    // cycle its labels are gone and the other pin's are still there.
    drop(agent.kill());
    tokio::time::sleep(Duration::from_secs(7).saturating_sub(pinned_at.elapsed())).await;
    let agent = Agent::start(&lab, dir.path(), &[]);
    agent.started().await;
    expect_pinned(&client, &kept.image_id, false, "none left behind").await;
    expect_pinned(&client, &second.image_id, true, "none lost").await;

    // containerd restart under the agent: labels are containerd's own state and stay; a pin
    // made after the restart is carried at the next cycle.
    lab.run_lab_script("restart-containerd");
    expect_pinned(
        &client,
        &second.image_id,
        true,
        "kept across the containerd restart",
    )
    .await;
    agent.cli(&["pin", &kept.reference]);
    agent.cycle();
    expect_pinned(
        &client,
        &kept.image_id,
        true,
        "pinned after the containerd restart",
    )
    .await;
    let names: Vec<String> = own_labelled(&containerd_images(&lab))
        .await
        .into_iter()
        .map(|i| i.name)
        .collect();
    assert!(
        names.iter().all(|n| !n.contains(&first.manifest_digest)),
        "the old image's names carry nothing: {names:?}"
    );
    drop(agent.kill());

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
    assert!(own_labelled(&containerd_images(&lab)).await.is_empty());
    expect_pinned(&client, &second.image_id, false, "").await;
    expect_pinned(&client, &kept.image_id, false, "").await;
    lab.remove_image(&moving).await;
}

#[tokio::test]
async fn on_1_7_and_2_1_a_present_warm_entry_and_a_side_loaded_image_are_pinned_and_the_sandbox_stays_pinned_when_keeps_end()
 {
    let Some(lab) = support::lab("runtime_pins_warm_and_side_loaded").await else {
        return;
    };
    if !release_carries_pins(&lab) {
        println!("containerd 1.6 lists nothing as pinned: the 1.6 behaviour is the first test's");
        return;
    }
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
        true,
        "a present warm entry is pinned",
    )
    .await;
    expect_pinned(
        &client,
        &source.image_id,
        true,
        "a side-loaded image is pinned",
    )
    .await;
    let labels = own_labelled(&containerd_images(&lab)).await;
    let why = |name: &str| {
        labels
            .iter()
            .find(|i| i.name == name)
            .and_then(|i| i.labels.get(OWN_LABEL).cloned())
    };
    assert_eq!(why(&warm.reference).as_deref(), Some("warm"));
    assert_eq!(why(&side_name).as_deref(), Some("no-repo-digest"));
    drop(agent.kill());
    // imagekeeper drops every keep: no warm set, irreplaceable images not protected.
    let agent = Agent::start(&lab, dir.path(), &["--protect-irreplaceable=false"]);
    agent.started().await;
    expect_pinned(&client, &warm.image_id, false, "").await;
    expect_pinned(&client, &source.image_id, false, "").await;
    expect_pinned(
        &client,
        sandbox_id.as_str(),
        true,
        "containerd's own sandbox pin stays",
    )
    .await;
    assert!(own_labelled(&containerd_images(&lab)).await.is_empty());
    drop(agent.kill());
    lab.remove_image(&side_name).await;
}
