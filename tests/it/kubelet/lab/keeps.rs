//! It obeys imagekeeper's keeps: the agent's runtime pins (issue 36) beside the real kubelet
//! v1.37.2 on containerd 2.3 (`kubelet::lab::keeps::...`). The kubelet's image GC and its
//! eviction manager's DeleteUnusedImages both skip an image the runtime lists `pinned`
//! (kubelet master pkg/kubelet/images/image_gc_manager.go, `imagesInEvictionOrder`); the test
//! reads what the kubelet did through crictl and the kubelet's own log.
//!
//! One kubelet restart serves both paths, so the test pays the image GC period (5 min) once:
//! the drop-in sets the image GC's thresholds (50 / 45 %) and an eviction line
//! (`imagefs.available` 35 %) both above the disk's usage, and the test moves the usage of the
//! image filesystem (a tmpfs) across them with a filler file of its own: above the eviction
//! line the eviction manager calls DeleteUnusedImages within its 10 s period; between the two
//! lines only the image GC's pass acts, at the restart's fifth minute.
//!
//! MinAge decides the timeline. Both paths skip an image younger than `imageMinimumGCAge` by
//! its first detection, and the kubelet detects an image only in a pass (its image GC, its
//! DeleteUnusedImages, its 5-minute detect loop); an image first seen by a pass is spared by
//! that pass whatever MinAge is (`freeSpace`: `freeTime.Sub(firstDetected) < MinAge`), and a
//! `0s` MinAge in the configuration is defaulted to 2m (seen here). So MinAge is 90 s: the
//! images for DeleteUnusedImages are present at the restart (detected then) and go once 90 s
//! old; the images for the image GC are pulled 60 s after the restart, while the pressure
//! lasts, so that a DeleteUnusedImages pass detects them (its log line after the pull) and the
//! pressure ends before they are 90 s old; the image GC's pass at the fifth minute then finds
//! them old enough.

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::super::{Agent, KubeletLab, NODEFS_LINE, kubelet_lab};
use super::{IMAGE_GC_PASS, image_id, imagefs, reference, remove_all_images_but_the_sandbox};
use crate::support::{self, bin};

/// The drop-in's lines, in percent of the image filesystem: the image GC's high and low
/// thresholds, and the eviction manager's `imagefs.available` (pressure when less is free).
const GC_HIGH: u64 = 50;
const GC_LOW: u64 = 45;
const EVICTION_AVAILABLE: u64 = 35;
/// The usage the filler sets: over the eviction line (pressure), or between the image GC's
/// high threshold and the eviction line (the image GC alone acts).
const PRESSURE_USAGE: u64 = 80;
const GC_ONLY_USAGE: u64 = 56;

/// How long the eviction manager may take to act on a usage change (its 10 s period, the
/// stats behind it, a slow machine).
const EVICTION_PASS: Duration = Duration::from_secs(120);
/// How long the eviction manager may take to say that the pressure ended once the filler is
/// gone: two of the waits above. One CI run saw no such line within 120 s (its kubelet log
/// was gone with the lab; the wait now prints the eviction manager's lines when it times out),
/// and the kubelet's own CRI calls may each take its 2-minute runtime request timeout. A
/// longer wait hides nothing: had the pressure lasted until the images for the image GC were
/// MinAge old, DeleteUnusedImages would have removed them, which the test asserts it did not.
const PRESSURE_END: Duration = Duration::from_secs(240);
/// The drop-in's `imageMinimumGCAge`, and when (after the restart) the images for the image
/// GC are pulled: half of it, so that the pressure (which ends once the first images went, at
/// MinAge) ends well before they are MinAge old.
const MIN_AGE: Duration = Duration::from_secs(90);
const PULL_FOR_GC_AT: Duration = Duration::from_secs(60);

/// A file that fills the image filesystem to a usage; removed when dropped.
struct Filler {
    path: PathBuf,
}

impl Filler {
    fn new(kl: &KubeletLab) -> Filler {
        let root = kl
            .lab
            .imagefs_root
            .clone()
            .expect("lab.env names CRI_LAB_IMAGEFS_ROOT (the image filesystem's tmpfs)");
        Filler {
            path: root.join("imagekeeper-test-filler"),
        }
    }

    /// Rewrites the filler so that the image filesystem is `percent` % used (statvfs, as the
    /// kubelet's cadvisor reads it). Real bytes: a sparse file would take no space on tmpfs.
    fn fill_to(&self, kl: &KubeletLab, percent: u64) {
        let _ = std::fs::remove_file(&self.path);
        let (capacity, available) = imagefs(kl);
        let target_used = capacity * percent / 100;
        let bytes = target_used.saturating_sub(capacity - available);
        let mut file = std::fs::File::create(&self.path).expect("create the filler");
        let chunk = vec![0xa5_u8; 1 << 20];
        let mut left = bytes;
        while left > 0 {
            let n = left.min(chunk.len() as u64) as usize;
            file.write_all(&chunk[..n]).expect("write the filler");
            left -= n as u64;
        }
        file.sync_all().expect("sync the filler");
        let (capacity, available) = imagefs(kl);
        println!(
            "image filesystem now {:.1} % used (filler {bytes} bytes)",
            (capacity - available) as f64 * 100.0 / capacity as f64
        );
    }

    fn remove(&self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

impl Drop for Filler {
    fn drop(&mut self) {
        self.remove();
    }
}

/// The labels the agent set and the image the test side-loaded, removed even when it fails.
struct Cleanup {
    endpoint: String,
    crictl: String,
    side_loaded: Option<String>,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = bin::run(&[
            "remove-runtime-pins",
            "--container-runtime-endpoint",
            &self.endpoint,
        ]);
        let Some(side_loaded) = &self.side_loaded else {
            return;
        };
        let _ = std::process::Command::new(&self.crictl)
            .args([
                "--runtime-endpoint",
                &self.endpoint,
                "--image-endpoint",
                &self.endpoint,
            ])
            .args(["rmi", side_loaded])
            .output();
    }
}

/// crictl's `pinned` of image `id` (None: not listed).
fn crictl_pinned(kl: &KubeletLab, id: &str) -> Option<bool> {
    let json: serde_json::Value =
        serde_json::from_str(&kl.crictl(&["images", "-o", "json"])).expect("crictl JSON");
    json["images"]
        .as_array()
        .expect("images")
        .iter()
        .find(|i| i["id"] == id)
        .and_then(|i| i["pinned"].as_bool())
}

async fn wait_pinned(kl: &KubeletLab, id: &str, want: bool, what: &str) {
    // Polled: the agent writes the labels at its next cycle (detect every second) and
    // containerd applies them on its own task; crictl's answer is the observable.
    support::wait_for(
        &format!("crictl to list {what} ({id}) pinned: {want}"),
        Duration::from_secs(60),
        || async { (crictl_pinned(kl, id) == Some(want)).then_some(()) },
    )
    .await;
}

/// `imagekeeper ARGS` through the running agent's admin socket.
fn through_agent(dir: &std::path::Path, args: &[&str]) {
    let socket = dir.join("admin.sock");
    let db = dir.join("records.redb");
    let mut all = args.to_vec();
    all.extend(["--admin-socket", socket.to_str().expect("utf8")]);
    all.extend(["--db", db.to_str().expect("utf8")]);
    let out = bin::run(&all);
    assert!(
        out.status.success(),
        "imagekeeper {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The id crictl gives `image`.
fn crictl_id(kl: &KubeletLab, image: &str) -> String {
    let json: serde_json::Value =
        serde_json::from_str(&kl.crictl(&["inspecti", "-o", "json", image])).expect("JSON");
    json["status"]["id"].as_str().expect("an id").to_owned()
}

/// The log lines, after byte `from`, that remove image `id`.
fn removals_of(log: &str, from: usize, id: &str) -> usize {
    log.get(from..)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("Removing image to free bytes") && l.contains(id))
        .count()
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the kubelet lab: scripts/kubelet-lab up, IMAGEKEEPER_KUBELET_LAB_ENV (scripts/test runs it)"]
async fn the_real_kubelets_image_gc_and_delete_unused_images_spare_the_agents_pin_warm_and_side_loaded_images_on_containerd_2_3_and_take_the_pin_after_unpin()
 {
    let mut kl = kubelet_lab("kubelet::lab::keeps").await;
    let test_started = Instant::now();
    let dir = tempfile::tempdir().expect("temp dir");
    remove_all_images_but_the_sandbox(&kl);

    let pinned = reference(&kl, "data:5mb");
    let warm = reference(&kl, "data:1mb");
    let side_loaded = format!("{}/side-loaded:1", kl.lab.image_prefix);
    let (pinned_id, warm_id, side_id) = (
        image_id(&kl, "data:5mb"),
        image_id(&kl, "data:1mb"),
        image_id(&kl, "user:uid"),
    );
    // Unused images the kubelet must remove: two for the eviction manager, two for the GC.
    let for_eviction = [reference(&kl, "data:20mb"), reference(&kl, "user:name")];
    let for_gc = [
        reference(&kl, "busybox:1.35"),
        kl.lab
            .files_image
            .clone()
            .expect("lab.env names CRI_LAB_FILES_IMAGE"),
    ];
    kl.crictl(&["pull", &pinned]);
    kl.crictl(&["pull", &warm]);
    // Side-loaded: a tarball (skopeo, inside the namespace where the registry is) imported
    // with ctr, so containerd lists it with a tag and no repo digest.
    let tar = kl.lab.dir.join("side-loaded.tar");
    kl.script(&[
        "exec",
        "skopeo",
        "copy",
        "--quiet",
        "--src-tls-verify=false",
        &format!("docker://{}", reference(&kl, "user:uid")),
        &format!("docker-archive:{}:{side_loaded}", tar.display()),
    ]);
    let _cleanup = Cleanup {
        endpoint: kl.env("KUBELET_LAB_ENDPOINT"),
        crictl: kl.env("KUBELET_LAB_CRICTL"),
        side_loaded: Some(side_loaded.clone()),
    };
    let ctr = std::path::Path::new(&kl.lab.env("CRI_LAB_CONTAINERD_BIN")).join("ctr");
    let out = std::process::Command::new(&ctr)
        .args([
            "--address",
            &kl.lab.env("CONTAINERD_ADDRESS"),
            "-n",
            "k8s.io",
        ])
        .args(["images", "import"])
        .arg(&tar)
        .output()
        .expect("ctr runs");
    let _ = std::fs::remove_file(&tar);
    assert!(
        out.status.success(),
        "ctr images import: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    for image in &for_eviction {
        kl.crictl(&["pull", image]);
    }
    let for_eviction: Vec<(String, String)> = for_eviction
        .iter()
        .map(|image| (image.clone(), crictl_id(&kl, image)))
        .collect();

    // The agent: runtime pins at their default (auto), a warm set of data:1mb, irreplaceable
    // images protected; its own GC off (100 / 99), a detect (and reconcile) every second.
    let config = dir.path().join("config.toml");
    std::fs::write(&config, format!("[[warm]]\nimage = \"{warm}\"\n")).expect("config");
    let db = dir.path().join("records.redb");
    let agent = Agent::spawn(
        &kl,
        dir.path(),
        &db,
        &[
            "--config",
            config.to_str().expect("utf8"),
            "--protect-irreplaceable=true",
            "--pod-infra-container-image",
            &kl.lab.sandbox_image,
            "--detect-period",
            "1s",
            "--gc-period",
            "1h",
            "--image-gc-high-threshold",
            "100",
            "--image-gc-low-threshold",
            "99",
        ],
    );
    agent.wait_for_line(&["Detected images"], 0).await;
    through_agent(dir.path(), &["pin", &pinned, "--reason", "kubelet-lab"]);
    wait_pinned(&kl, &pinned_id, true, "the image pinned through the agent").await;
    wait_pinned(&kl, &warm_id, true, "the present warm entry").await;
    wait_pinned(&kl, &side_id, true, "the side-loaded image").await;
    for (image, id) in &for_eviction {
        assert_eq!(crictl_pinned(&kl, id), Some(false), "{image}");
    }
    let kept = [
        (pinned_id.as_str(), "pinned"),
        (warm_id.as_str(), "warm"),
        (side_id.as_str(), "side-loaded"),
    ];

    // The kubelet restarts with both lines above the usage now: its image GC's pass at the
    // start does nothing, its next comes ImageGCPeriod (5 min) later.
    let (capacity, available) = imagefs(&kl);
    let usage = (capacity - available) * 100 / capacity;
    assert!(usage + 5 < GC_HIGH, "the lab's images use {usage} %");
    kl.write_drop_in(
        "80-keeps",
        &format!(
            "imageMinimumGCAge: {}s\nimageGCHighThresholdPercent: {GC_HIGH}\n\
             imageGCLowThresholdPercent: {GC_LOW}\nevictionHard:\n  imagefs.available: \"{EVICTION_AVAILABLE}%\"\n  {NODEFS_LINE}\n",
            MIN_AGE.as_secs()
        ),
    );
    kl.restart();
    let restarted = Instant::now();
    let filler = Filler::new(&kl);

    // (1) DeleteUnusedImages: pressure; the unused unpinned images go once MinAge old, the
    // keeps stay.
    filler.fill_to(&kl, PRESSURE_USAGE);
    // Meanwhile the images for the image GC are pulled and seen by a DeleteUnusedImages pass
    // (time passing, not an ordering: see the module's note on MinAge).
    tokio::time::sleep(PULL_FOR_GC_AT.saturating_sub(restarted.elapsed())).await;
    for image in &for_gc {
        kl.crictl(&["pull", image]);
    }
    let for_gc: Vec<(String, String)> = for_gc
        .iter()
        .map(|image| (image.clone(), crictl_id(&kl, image)))
        .collect();
    let from = kl.log().len();
    kl.wait_for_log_line(&["Attempting to delete unused images"], from, EVICTION_PASS)
        .await;
    for (image, id) in &for_eviction {
        let (line, _) = kl
            .wait_for_log_line(
                &["Removing image to free bytes", id],
                0,
                MIN_AGE + EVICTION_PASS,
            )
            .await;
        println!("DeleteUnusedImages took {image}: {line}");
    }
    println!(
        "DeleteUnusedImages took them {:.0} s after the restart",
        restarted.elapsed().as_secs_f64()
    );
    filler.remove();
    // What the image filesystem holds without the filler (statvfs, as the kubelet's cadvisor
    // reads it): a pressure that outlasts the filler's removal names its cause from here.
    let (capacity, available) = imagefs(&kl);
    println!(
        "filler removed: image filesystem {:.1} % used, {available} of {capacity} bytes available",
        (capacity - available) as f64 * 100.0 / capacity as f64
    );
    let log = kl.log();
    assert!(
        log.contains(
            "\"Eviction manager: attempting to reclaim\" resourceName=\"ephemeral-storage\""
        ),
        "the eviction manager reclaimed for imagefs pressure"
    );
    assert!(
        !log.contains("Disk usage on image filesystem is over the high threshold"),
        "no image GC pass acted yet: the removals are DeleteUnusedImages'"
    );
    let listed = kl.crictl_image_ids();
    for (id, what) in kept {
        assert!(listed.contains(&id.to_owned()), "{what} stays: {listed:?}");
        assert_eq!(
            removals_of(&log, 0, id),
            0,
            "the kubelet never tried {what}"
        );
    }
    for (image, id) in &for_eviction {
        assert!(!listed.contains(id), "{image}: {listed:?}");
    }

    // (2) The image GC alone: no pressure (the eviction manager says so), usage between the
    // image GC's high threshold and the eviction line.
    let from = kl.log().len();
    kl.wait_for_log_line(
        &["Eviction manager: no resources are starved"],
        from,
        PRESSURE_END,
    )
    .await;
    let calm = kl.log().len();
    for (image, id) in &for_gc {
        assert_eq!(
            removals_of(&kl.log(), 0, id),
            0,
            "DeleteUnusedImages left {image} (younger than MinAge)"
        );
    }
    filler.fill_to(&kl, GC_ONLY_USAGE);
    for (image, id) in &for_gc {
        let (line, _) = kl
            .wait_for_log_line(&["Removing image to free bytes", id], calm, IMAGE_GC_PASS)
            .await;
        println!("image GC took {image}: {line}");
    }
    println!(
        "the image GC pass acted {:.0} s after the restart",
        restarted.elapsed().as_secs_f64()
    );
    let log = kl.log();
    let after = &log[calm..];
    let over = after
        .find("Disk usage on image filesystem is over the high threshold")
        .expect("the image GC's space pass ran");
    let first_removal = after
        .find("Removing image to free bytes")
        .expect("a removal");
    assert!(
        over < first_removal,
        "the removals follow the image GC's own line"
    );
    assert!(
        !after.contains("Attempting to delete unused images"),
        "no DeleteUnusedImages since the pressure ended"
    );
    let listed = kl.crictl_image_ids();
    for (id, what) in kept {
        assert!(listed.contains(&id.to_owned()), "{what} stays: {listed:?}");
        assert_eq!(
            removals_of(&log, 0, id),
            0,
            "the kubelet never tried {what}"
        );
    }

    // (3) unpin: the agent takes its labels off, and the eviction manager's next pass
    // (pressure again) takes the image; the warm and side-loaded images stay.
    through_agent(dir.path(), &["unpin", &pinned]);
    wait_pinned(&kl, &pinned_id, false, "the unpinned image").await;
    let from = kl.log().len();
    filler.fill_to(&kl, PRESSURE_USAGE);
    let (line, _) = kl
        .wait_for_log_line(
            &["Removing image to free bytes", &pinned_id],
            from,
            EVICTION_PASS,
        )
        .await;
    println!("after unpin: {line}");
    filler.remove();
    support::wait_for(
        "crictl to list the unpinned image no more",
        Duration::from_secs(30),
        || async { (!kl.crictl_image_ids().contains(&pinned_id)).then_some(()) },
    )
    .await;
    let log = kl.log();
    let listed = kl.crictl_image_ids();
    for (id, what) in &kept[1..] {
        assert!(
            listed.contains(&(*id).to_owned()),
            "{what} stays: {listed:?}"
        );
        assert_eq!(
            removals_of(&log, 0, id),
            0,
            "the kubelet never tried {what}"
        );
    }
    agent.stop();
    println!(
        "keeps test: {:.0} s in all",
        test_started.elapsed().as_secs_f64()
    );
}

/// A pin reaches the runtime when it is made (issue 53, item 2), proved the way a node would
/// press on it: the agent at its default periods (a detect every 5 minutes, its own GC off),
/// `imagekeeper pin` through it, and the kubelet's pressure at once, with no wait for a label
/// or a cycle: when `pin` answers, crictl already lists the image `pinned: true`, and the
/// eviction manager's DeleteUnusedImages (every 10 s under pressure, MinAge 1 s) removes the
/// other unused image and leaves the pinned one. `unpin` answers once the runtime carries
/// that too, and the next pass takes the image. Before the fix, the label came with the next
/// detect, minutes away, and the kubelet removed the image about 20 s after the pin.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the kubelet lab: scripts/kubelet-lab up, IMAGEKEEPER_KUBELET_LAB_ENV (scripts/test runs it)"]
async fn a_pin_through_the_agent_at_its_default_periods_is_carried_when_pin_answers_so_the_real_kubelets_delete_unused_images_right_after_spares_it_until_unpin()
 {
    let mut kl = kubelet_lab("kubelet::lab::keeps::pin_under_pressure").await;
    let dir = tempfile::tempdir().expect("temp dir");
    remove_all_images_but_the_sandbox(&kl);
    let kept = reference(&kl, "data:5mb");
    let other = reference(&kl, "data:1mb");
    kl.crictl(&["pull", &kept]);
    kl.crictl(&["pull", &other]);
    let (kept_id, other_id) = (crictl_id(&kl, &kept), crictl_id(&kl, &other));
    let _cleanup = Cleanup {
        endpoint: kl.env("KUBELET_LAB_ENDPOINT"),
        crictl: kl.env("KUBELET_LAB_CRICTL"),
        side_loaded: None,
    };
    let db = dir.path().join("records.redb");
    let agent = Agent::spawn(
        &kl,
        dir.path(),
        &db,
        &[
            "--image-gc-high-threshold",
            "100",
            "--image-gc-low-threshold",
            "99",
        ],
    );
    agent.wait_for_line(&["Detected images"], 0).await;
    assert_eq!(crictl_pinned(&kl, &kept_id), Some(false), "{kept}");

    through_agent(dir.path(), &["pin", &kept, "--reason", "kubelet-lab"]);
    assert_eq!(
        crictl_pinned(&kl, &kept_id),
        Some(true),
        "the runtime carries the pin when `pin` answers"
    );
    // The pressure, right after: every image unused and past MinAge is the eviction
    // manager's to remove at its next pass.
    kl.write_imagefs_pressure_drop_in();
    kl.restart();
    let (removal, _) = kl
        .wait_for_log_line(
            &["Removing image to free bytes", &other_id],
            0,
            EVICTION_PASS,
        )
        .await;
    println!("{removal}");
    let listed = kl.crictl_image_ids();
    assert!(!listed.contains(&other_id), "{listed:?}");
    assert!(
        listed.contains(&kept_id),
        "the pinned image stays: {listed:?}"
    );
    assert_eq!(removals_of(&kl.log(), 0, &kept_id), 0, "never tried");

    let from = kl.log().len();
    through_agent(dir.path(), &["unpin", &kept]);
    assert_eq!(
        crictl_pinned(&kl, &kept_id),
        Some(false),
        "the runtime drops the pin when `unpin` answers"
    );
    let (removal, _) = kl
        .wait_for_log_line(
            &["Removing image to free bytes", &kept_id],
            from,
            EVICTION_PASS,
        )
        .await;
    println!("after unpin: {removal}");
    drop(agent);
}
