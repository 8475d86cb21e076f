//! Beside a real kubelet (v1.37.2, `scripts/kubelet-lab`) on containerd 2.3 (named `kubelet::lab::...`,
//! one at a time in nextest's `kubelet-lab` group). Each test reads what happened through crictl
//! or the kubelet's own log (and its files), not only through imagekeeper.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use imagekeeper::kubelet::record_file_name;
use imagekeeper::model::RemovalReason;
use imagekeeper::store::Store;

use super::{Agent, CONTAINERD_RELEASE, KubeletLab, StaticPod, kubelet_lab};
use crate::support::{self, bin};

mod daemonset;
mod init_container;
mod intents;
mod keeps;

/// How long a static pod may take to run (the kubelet checks its directory every second; a
/// first pull from the namespace's registry is quick).
const POD_START: Duration = Duration::from_secs(120);

/// The kubelet's image GC period, a constant (`ImageGCPeriod`, pkg/kubelet/kubelet.go), plus
/// room for a slow machine: the longest a test waits for a pass.
const IMAGE_GC_PASS: Duration = Duration::from_secs(5 * 60 + 90);

/// The image ids, in the lab's images.tsv, of short references.
fn image_id(kl: &KubeletLab, short: &str) -> String {
    kl.lab.image(short).image_id.clone()
}

/// `crictl rmi REF` when the image is present (a test that needs the kubelet to pull starts
/// from an absent image).
fn remove_if_present(kl: &KubeletLab, reference: &str) {
    let out = kl.crictl_output(&["rmi", reference]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() || stderr.contains("no such image"),
        "crictl rmi {reference}: {stderr}"
    );
}

/// Removes every image but the sandbox image (which containerd 2.x pins): a test that needs the
/// image filesystem to hold its own images alone starts here.
fn remove_all_images_but_the_sandbox(kl: &KubeletLab) {
    let json: serde_json::Value =
        serde_json::from_str(&kl.crictl(&["images", "-o", "json"])).expect("crictl JSON");
    for image in json["images"].as_array().expect("images") {
        let tags = image["repoTags"].as_array().cloned().unwrap_or_default();
        if tags.iter().any(|t| t == kl.lab.sandbox_image.as_str()) {
            continue;
        }
        kl.crictl(&["rmi", image["id"].as_str().expect("id")]);
    }
}

fn reference(kl: &KubeletLab, short: &str) -> String {
    format!("{}/{short}", kl.lab.image_prefix)
}

/// The records of a stopped agent's database.
fn records(db: &Path) -> Vec<imagekeeper::store::StoredRecord> {
    Store::open_read_only(db)
        .expect("open the records read-only")
        .records()
        .expect("records")
}

/// The image filesystem as statvfs (the kubelet's cadvisor and imagekeeper both) reads it:
/// (capacity, available) in bytes.
fn imagefs(kl: &KubeletLab) -> (u64, u64) {
    let path = std::ffi::CString::new(kl.lab.imagefs_mountpoint.clone()).expect("no NUL");
    // SAFETY: statvfs(3) with a valid path and an out-struct it fills.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::statvfs(path.as_ptr(), &mut st) };
    assert_eq!(rc, 0, "statvfs {}", kl.lab.imagefs_mountpoint);
    (st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize)
}

/// Thresholds just under the image filesystem's usage now: the high one is crossed with at
/// least 0.5 % to spare, and freeing down to the low one needs 0.5-1.5 % of the capacity (a
/// few MiB on the lab's 512 MiB tmpfs: one of the data images frees it).
fn thresholds_just_under_usage(kl: &KubeletLab) -> (u64, u64, f64) {
    let (capacity, available) = imagefs(kl);
    let used = (capacity - available) as f64 * 100.0 / capacity as f64;
    let low = (used - 0.5).floor() as u64;
    (low + 1, low, used)
}

/// A pod's container start time as crictl reports it (RFC 3339 with nanoseconds).
fn container_created_at(kl: &KubeletLab, container: &str) -> jiff::Timestamp {
    let json: serde_json::Value =
        serde_json::from_str(&kl.crictl(&["inspect", "-o", "json", container])).expect("JSON");
    json["status"]["createdAt"]
        .as_str()
        .expect("createdAt")
        .parse()
        .expect("an RFC 3339 time")
}

fn nanos(t: jiff::Timestamp) -> i64 {
    i64::try_from(t.as_nanosecond()).expect("fits i64")
}

/// The outcome of the kubelet's image GC pass at its start (`wait.Until` runs it at once), which
/// frees nothing: either its stats are not ready yet ("invalid capacity 0 on image
/// filesystem", seen on this machine) or every image is newly detected and MinAge spares them
/// all ("Failed to free sufficient space by deleting unused images (freed 0 bytes)", after "Disk
/// usage on image filesystem is over the high threshold"). Panics on any other outcome or on a
/// removal.
async fn kubelet_start_pass(kl: &KubeletLab) -> String {
    let (line, _) = kl
        .wait_for_log_line(&["Image garbage collection"], 0, Duration::from_secs(60))
        .await;
    assert!(
        line.contains("invalid capacity 0 on image filesystem")
            || line.contains(
                "Failed to free sufficient space by deleting unused images (freed 0 bytes)"
            ),
        "the kubelet's pass at its start frees nothing: {line}"
    );
    assert!(
        !kl.log().contains("Removing image to free bytes"),
        "no removal at the kubelet's start"
    );
    line
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the kubelet lab: scripts/kubelet-lab up, IMAGEKEEPER_KUBELET_LAB_ENV (scripts/test runs it)"]
async fn the_lab_kubelet_is_v1_37_2_answers_healthz_and_runs_a_static_pod_on_containerd_2_3() {
    let mut kl = kubelet_lab("kubelet::lab::smoke").await;
    let version = Command::new(kl.env("KUBELET_LAB_BIN"))
        .arg("--version")
        .output()
        .expect("kubelet --version");
    assert_eq!(
        String::from_utf8_lossy(&version.stdout).trim(),
        "Kubernetes v1.37.2"
    );
    assert_eq!(kl.env("KUBELET_LAB_VERSION"), "v1.37.2");
    let healthz =
        kl.curl_in_namespace(&format!("http://{}/healthz", kl.env("KUBELET_LAB_HEALTHZ")));
    assert_eq!(healthz, "ok");
    let runtime = kl.crictl(&["version"]);
    assert!(
        // containerd's release builds say v2.3.7, Debian's packages 2.1.9~ds1.
        runtime.contains(&format!("RuntimeVersion:  {CONTAINERD_RELEASE}."))
            || runtime.contains(&format!("RuntimeVersion:  v{CONTAINERD_RELEASE}.")),
        "the lab runs containerd {CONTAINERD_RELEASE}: {runtime}"
    );
    let image = reference(&kl, "busybox:1.35");
    kl.add_static_pod(&StaticPod {
        name: "smoke",
        image: &image,
        command: &["sleep", "3600"],
        pull_policy: "IfNotPresent",
    });
    let container = kl.running_container("smoke", POD_START).await;
    let inspect = kl.crictl(&["inspect", "-o", "json", &container]);
    assert!(inspect.contains(&image), "{inspect}");
    kl.remove_static_pod("smoke");
    kl.pod_gone("smoke", POD_START).await;
}

/// The amnesia, live. Static pods use data:20mb, then data:5mb, then data:1mb (the oldest use
/// first) while imagekeeper records their use; the pods go; the kubelet restarts with image GC
/// thresholds just under the disk's usage (a drop-in), so one image must go.
/// (A) imagekeeper acts first: the kubelet's pass at its start frees nothing (every image is
/// newly detected, so MinAge spares them all: its log says so), and `imagekeeper gc`, at once,
/// removes data:20mb, the least recently used by its records (its journal; crictl).
/// (B) The kubelet alone: the image is pulled back, the kubelet restarts again and imagekeeper
/// stays out; the kubelet frees nothing until its next pass, a fixed 5 minutes later (measured),
/// then removes images by an order that holds no use at all (its log says which).
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the kubelet lab: scripts/kubelet-lab up, IMAGEKEEPER_KUBELET_LAB_ENV (scripts/test runs it)"]
async fn after_a_real_kubelet_restart_imagekeeper_gc_takes_the_least_recently_used_image_the_kubelet_spares_then_guesses()
 {
    let mut kl = kubelet_lab("kubelet::lab::amnesia").await;
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("records.redb");
    let order = ["data:20mb", "data:5mb", "data:1mb"];
    remove_all_images_but_the_sandbox(&kl);
    // The agent records use; its own GC stays off (100 / 99) until the test runs it.
    let agent = Agent::spawn(
        &kl,
        dir.path(),
        &db,
        &[
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
    for (i, short) in order.iter().enumerate() {
        let name = format!("amnesia-{i}");
        let image = reference(&kl, short);
        kl.add_static_pod(&StaticPod {
            name: &name,
            image: &image,
            command: &["sleep", "3600"],
            pull_policy: "IfNotPresent",
        });
        let container = kl.running_container(&name, POD_START).await;
        // The container the kubelet started is marked used by the event (containerd 2.3)...
        agent
            .wait_for_line(&["marked its images used", &container], 0)
            .await;
        // ...and the pod goes before the next one starts: the uses are in this order.
        kl.remove_static_pod(&name);
        kl.pod_gone(&name, POD_START).await;
    }
    agent.stop();
    let used: Vec<i64> = order
        .iter()
        .map(|short| {
            let id = image_id(&kl, short);
            records(&db)
                .into_iter()
                .find(|r| r.key.image_id.0 == id)
                .unwrap_or_else(|| panic!("a record of {short}"))
                .record
                .last_used
                .0
        })
        .collect();
    assert!(
        used[0] < used[1] && used[1] < used[2],
        "imagekeeper recorded the uses in order: {used:?}"
    );

    // MinAge 10s on both sides: wait (time passing, not an ordering) until imagekeeper's
    // records make every image older than that, as on a node where the images are not new.
    let newest = records(&db)
        .iter()
        .map(|r| r.record.first_detected.0)
        .max()
        .expect("records");
    let old_enough = newest + 11_000_000_000;
    let now = nanos(jiff::Timestamp::now());
    if now < old_enough {
        tokio::time::sleep(Duration::from_nanos(
            u64::try_from(old_enough - now).expect("positive"),
        ))
        .await;
    }
    let (high, low, usage) = thresholds_just_under_usage(&kl);
    kl.write_drop_in(
        "50-amnesia",
        &format!(
            "imageGCHighThresholdPercent: {high}\nimageGCLowThresholdPercent: {low}\nimageMinimumGCAge: 10s\n"
        ),
    );
    println!("image filesystem at {usage:.2}% used: thresholds {high} / {low}");

    // (A) imagekeeper acts first.
    let restarted = Instant::now();
    kl.restart();
    let start_pass = kubelet_start_pass(&kl).await;
    println!("the kubelet's image GC pass at its start: {start_pass}");
    let gc = bin::run(&[
        "gc",
        "--db",
        db.to_str().expect("utf8"),
        "--container-runtime-endpoint",
        &kl.env("KUBELET_LAB_ENDPOINT"),
        "--kubelet-root-dir",
        kl.root_dir().to_str().expect("utf8"),
        "--image-gc-high-threshold",
        &high.to_string(),
        "--image-gc-low-threshold",
        &low.to_string(),
        "--minimum-image-ttl-duration",
        "10s",
        "--admin-socket",
        dir.path().join("none.sock").to_str().expect("utf8"),
    ]);
    let imagekeeper_freed_after = restarted.elapsed();
    assert!(
        gc.status.success(),
        "imagekeeper gc: {}",
        String::from_utf8_lossy(&gc.stderr)
    );
    let store = Store::open_read_only(&db).expect("open");
    let removed: Vec<(String, Option<RemovalReason>)> = store
        .journal()
        .expect("journal")
        .into_iter()
        .map(|(key, entry)| (key.key.image_id.0.clone(), entry.reason))
        .collect();
    drop(store);
    assert_eq!(
        removed,
        [(image_id(&kl, "data:20mb"), Some(RemovalReason::Space))],
        "imagekeeper's GC took the least recently used image, and only it"
    );
    let listed = kl.crictl_image_ids();
    assert!(!listed.contains(&image_id(&kl, "data:20mb")), "{listed:?}");
    assert!(listed.contains(&image_id(&kl, "data:5mb")), "{listed:?}");
    assert!(listed.contains(&image_id(&kl, "data:1mb")), "{listed:?}");
    println!(
        "imagekeeper freed data:20mb {:.1} s after the kubelet's restart",
        imagekeeper_freed_after.as_secs_f64()
    );

    // (B) The kubelet alone, from the same state.
    kl.crictl(&["pull", &reference(&kl, "data:20mb")]);
    let restarted = Instant::now();
    kl.restart();
    let start_pass = kubelet_start_pass(&kl).await;
    println!("the kubelet's image GC pass at its start: {start_pass}");
    let (removal, seen) = kl
        .wait_for_log_line(&["Removing image to free bytes"], 0, IMAGE_GC_PASS)
        .await;
    let frees_nothing_for = seen - restarted;
    println!(
        "the kubelet alone freed nothing for {:.0} s after its restart, then: {removal}",
        frees_nothing_for.as_secs_f64()
    );
    let log = kl.log();
    let kubelet_removed: Vec<&str> = log
        .lines()
        .filter(|line| line.contains("Removing image to free bytes"))
        .collect();
    println!("the kubelet's removals: {kubelet_removed:#?}");
    assert!(
        frees_nothing_for >= Duration::from_secs(290),
        "the kubelet's next image GC pass comes ImageGCPeriod (5 min) after its start: {frees_nothing_for:?}"
    );
}

/// Use seen from the kubelet's containers. (1) With a detect only at its start, the agent marks
/// the image of a container the kubelet starts used through containerd 2.3's container events,
/// before any later detect. (2) With the events off, the next detect marks it. Either way the
/// record's last use is at or after the container's creation as crictl reports it.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the kubelet lab: scripts/kubelet-lab up, IMAGEKEEPER_KUBELET_LAB_ENV (scripts/test runs it)"]
async fn containers_the_real_kubelet_starts_mark_their_images_used_by_event_and_by_detect() {
    let mut kl = kubelet_lab("kubelet::lab::use").await;
    let dir = tempfile::tempdir().expect("temp dir");

    // (1) events: one detect at the start, then none for an hour.
    let db = dir.path().join("events.redb");
    let image = reference(&kl, "user:name");
    let agent = Agent::spawn(
        &kl,
        dir.path(),
        &db,
        &["--detect-period", "1h", "--gc-period", "1h"],
    );
    agent.wait_for_line(&["Detected images"], 0).await;
    kl.add_static_pod(&StaticPod {
        name: "use-events",
        image: &image,
        command: &["sleep", "3600"],
        pull_policy: "IfNotPresent",
    });
    let container = kl.running_container("use-events", POD_START).await;
    agent
        .wait_for_line(&["marked its images used", &container], 0)
        .await;
    let detects = agent.log().matches("Detected images").count();
    assert_eq!(detects, 1, "only the detect at the agent's start ran");
    agent.stop();
    let created = container_created_at(&kl, &container);
    let id = image_id(&kl, "user:name");
    let record = records(&db)
        .into_iter()
        .find(|r| r.key.image_id.0 == id)
        .expect("the event created the image's record");
    assert!(
        record.record.last_used.0 >= nanos(created),
        "last used {:?} at or after the container's creation {created}",
        record.record.last_used
    );
    kl.remove_static_pod("use-events");
    kl.pod_gone("use-events", POD_START).await;

    // (2) detect: the events off, a detect every second.
    let db = dir.path().join("detect.redb");
    let image = reference(&kl, "busybox:1.35");
    let agent = Agent::spawn(
        &kl,
        dir.path(),
        &db,
        &[
            "--detect-period",
            "1s",
            "--gc-period",
            "1h",
            "--container-events",
            "off",
        ],
    );
    kl.add_static_pod(&StaticPod {
        name: "use-detect",
        image: &image,
        command: &["sleep", "3600"],
        pull_policy: "IfNotPresent",
    });
    let container = kl.running_container("use-detect", POD_START).await;
    // A detect that began after crictl saw the container running.
    let from = agent.log().len();
    agent.wait_for_line(&["Detected images"], from).await;
    assert!(
        !agent.log().contains("marked its images used"),
        "with --container-events off no event marks"
    );
    agent.stop();
    let created = container_created_at(&kl, &container);
    let id = image_id(&kl, "busybox:1.35");
    let record = records(&db)
        .into_iter()
        .find(|r| r.key.image_id.0 == id)
        .expect("a record of busybox");
    assert!(
        record.record.last_used.0 >= nanos(created),
        "last used {:?} at or after the container's creation {created}",
        record.record.last_used
    );
}

/// The kubelet's KEP-2535 pulled record, as the real kubelet writes it, read by imagekeeper. The
/// image is pulled first through crictl and detected by imagekeeper (no kubelet record); later a
/// static pod with `imagePullPolicy: Always` makes the kubelet pull it and write
/// `<root>/image_manager/pulled/sha256-<sha256 of the image id>`. Its `lastUpdatedTime` is a use
/// to imagekeeper: `inspect explain` shows it (`kubelet_pulled_at`) and, once the image is
/// older than MinAge by its first detection but the record is not, keeps the image
/// (`keep_kubelet_just_pulled`), which the same database without the kubelet's directory would
/// remove.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the kubelet lab: scripts/kubelet-lab up, IMAGEKEEPER_KUBELET_LAB_ENV (scripts/test runs it)"]
async fn the_real_kubelets_pulled_record_is_a_use_to_imagekeeper_that_keeps_a_just_pulled_image() {
    let mut kl = kubelet_lab("kubelet::lab::records").await;
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("records.redb");
    let image = reference(&kl, "user:uid");
    let id = image_id(&kl, "user:uid");
    let record_path = kl
        .root_dir()
        .join("image_manager/pulled")
        .join(record_file_name(&id));
    if record_path.exists() {
        // Left by an earlier run in this lab: the kubelet reads its records at start.
        std::fs::remove_file(&record_path).expect("remove the old record");
        kl.restart();
    }
    remove_if_present(&kl, &image);
    kl.crictl(&["pull", &image]);
    let root = kl.root_dir();
    let endpoint = kl.env("KUBELET_LAB_ENDPOINT");
    let none = dir.path().join("none.sock");
    let gc = bin::run(&[
        "gc",
        "--db",
        db.to_str().expect("utf8"),
        "--container-runtime-endpoint",
        &endpoint,
        "--kubelet-root-dir",
        root.to_str().expect("utf8"),
        "--image-gc-high-threshold",
        "100",
        "--image-gc-low-threshold",
        "99",
        "--admin-socket",
        none.to_str().expect("utf8"),
    ]);
    assert!(
        gc.status.success(),
        "{}",
        String::from_utf8_lossy(&gc.stderr)
    );
    let first_detected = records(&db)
        .into_iter()
        .find(|r| r.key.image_id.0 == id)
        .expect("detected")
        .record
        .first_detected
        .0;
    assert!(
        !record_path.exists(),
        "crictl's pull wrote no kubelet record"
    );
    // Time passes (not an ordering proof): the record's second-precision time falls at least a
    // second after the first detection.
    tokio::time::sleep(Duration::from_secs(2)).await;

    kl.add_static_pod(&StaticPod {
        name: "records",
        image: &image,
        command: &["sleep", "3600"],
        pull_policy: "Always",
    });
    kl.running_container("records", POD_START).await;
    let text = std::fs::read_to_string(&record_path).unwrap_or_else(|err| {
        panic!(
            "the kubelet wrote {} before starting the container: {err}",
            record_path.display()
        )
    });
    let json: serde_json::Value = serde_json::from_str(&text).expect("the record is JSON");
    assert_eq!(json["kind"], "ImagePulledRecord", "{text}");
    assert_eq!(
        json["apiVersion"], "kubelet.config.k8s.io/v1beta1",
        "{text}"
    );
    assert_eq!(json["imageRef"], id.as_str(), "{text}");
    let repository = image.rsplit_once(':').expect("a tag").0;
    assert_eq!(
        json["credentialMapping"][repository]["nodePodsAccessible"], true,
        "a pod with no pull secret: {text}"
    );
    let pulled: jiff::Timestamp = json["lastUpdatedTime"]
        .as_str()
        .expect("lastUpdatedTime")
        .parse()
        .expect("RFC 3339");
    assert!(
        nanos(pulled) > first_detected,
        "{pulled} after the first detection"
    );
    kl.remove_static_pod("records");
    kl.pod_gone("records", POD_START).await;

    // An hour after the first detection, MinAge 1h: the first detection no longer keeps it, the
    // kubelet's record (younger) does; the disk wants everything gone.
    let now = jiff::Timestamp::from_nanosecond(i128::from(first_detected) + 3_600_000_000_000)
        .expect("a time")
        .to_string();
    let explain = |kubelet_root: &str| -> serde_json::Value {
        let out = bin::run(&[
            "inspect",
            "explain",
            "--db",
            db.to_str().expect("utf8"),
            "--now",
            &now,
            "--min-age",
            "1h",
            "--capacity",
            "1000000000",
            "--available",
            "1000",
            "--kubelet-root-dir",
            kubelet_root,
            "-o",
            "json",
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let all: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
        all["images"]
            .as_array()
            .expect("images")
            .iter()
            .find(|i| i["id"] == id.as_str())
            .cloned()
            .unwrap_or_else(|| panic!("{id} in {all}"))
    };
    let with_kubelet = explain(root.to_str().expect("utf8"));
    assert_eq!(
        with_kubelet["decision"], "keep_kubelet_just_pulled",
        "{with_kubelet}"
    );
    assert_eq!(with_kubelet["remove"], false, "{with_kubelet}");
    let shown: jiff::Timestamp = with_kubelet["kubelet_pulled_at"]
        .as_str()
        .expect("kubelet_pulled_at")
        .parse()
        .expect("RFC 3339");
    assert_eq!(shown, pulled, "the record's own time");
    let without = explain("");
    assert_eq!(without["remove"], true, "{without}");
}

/// The kubelet's own view of its configuration (`/configz` on its port, inside the namespace).
fn configz(kl: &KubeletLab) -> serde_json::Value {
    let body = kl.curl_in_namespace(&format!("https://{}/configz", kl.env("KUBELET_LAB_PORT")));
    let json: serde_json::Value = serde_json::from_str(&body).expect("configz is JSON");
    json["kubeletconfig"].clone()
}

/// `imagekeeper doctor -o json` on the lab kubelet's config file, drop-ins and root directory
/// with imagekeeper's defaults (85 / 80); (exit code, findings by check).
fn doctor(kl: &KubeletLab) -> (i32, serde_json::Value) {
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
        "-o",
        "json",
    ]);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|err| {
        panic!(
            "doctor printed JSON: {err}: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().expect("an exit code"), report)
}

fn finding<'a>(report: &'a serde_json::Value, check: &str) -> &'a serde_json::Value {
    report["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .find(|f| f["check"] == check)
        .unwrap_or_else(|| panic!("no {check} finding in {report}"))
}

/// `doctor` on the real kubelet. With the kubelet's defaults (image GC 85 / 80, evictionHard
/// imagefs.available 15%, as its `/configz` says) and imagekeeper's (85 / 80), doctor finds two
/// conflicts and prints fixes naming the kubelet's fields; the kubelet half of each fix written
/// as a drop-in in the kubelet's own `--config-dir` and the kubelet restarted, `/configz` shows
/// the new values (the merged default eviction thresholds kept) and doctor finds none.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the kubelet lab: scripts/kubelet-lab up, IMAGEKEEPER_KUBELET_LAB_ENV (scripts/test runs it)"]
async fn doctor_on_the_real_kubelet_finds_the_conflict_and_its_fix_as_a_drop_in_clears_it_after_a_restart()
 {
    let mut kl = kubelet_lab("kubelet::lab::doctor").await;
    let before = configz(&kl);
    assert_eq!(before["imageGCHighThresholdPercent"], 85, "{before}");
    assert_eq!(
        before["evictionHard"]["imagefs.available"], "15%",
        "{before}"
    );
    let (code, report) = doctor(&kl);
    assert_eq!(code, 1, "{report}");
    assert_eq!(report["conflicts"], 2, "{report}");
    let eviction = finding(&report, "eviction-hard-imagefs");
    assert_eq!(eviction["status"], "conflict", "{eviction}");
    let fix = eviction["fix"].as_str().expect("a fix");
    assert!(
        fix.contains("lower the kubelet's evictionHard imagefs.available"),
        "{fix}"
    );
    let thresholds = finding(&report, "image-gc-thresholds");
    assert_eq!(thresholds["status"], "conflict", "{thresholds}");
    let fix = thresholds["fix"].as_str().expect("a fix");
    assert!(
        fix.contains("raise the kubelet's imageGCHighThresholdPercent above 85"),
        "{fix}"
    );

    // The kubelet's half of both fixes, as `beside-the-kubelet.md` spells it.
    kl.write_drop_in(
        "60-imagekeeper",
        "imageGCHighThresholdPercent: 90\nimageGCLowThresholdPercent: 88\n\
         evictionHard:\n  imagefs.available: \"5%\"\nmergeDefaultEvictionSettings: true\n",
    );
    kl.restart();
    let after = configz(&kl);
    assert_eq!(after["imageGCHighThresholdPercent"], 90, "{after}");
    assert_eq!(after["imageGCLowThresholdPercent"], 88, "{after}");
    assert_eq!(after["evictionHard"]["imagefs.available"], "5%", "{after}");
    assert_eq!(
        after["evictionHard"]["memory.available"], "100Mi",
        "the default thresholds merged in: {after}"
    );
    let (code, report) = doctor(&kl);
    assert_eq!(report["conflicts"], 0, "{report}");
    assert_eq!(code, 0, "{report}");
    for check in ["eviction-hard-imagefs", "image-gc-thresholds"] {
        assert_eq!(finding(&report, check)["status"], "ok", "{report}");
    }
}

/// `ctr -n k8s.io images label REF LABEL` with the lab's own ctr (containerd 2.3's).
fn ctr_label(kl: &KubeletLab, reference: &str, label: &str) {
    let ctr = Path::new(&kl.lab.env("CRI_LAB_CONTAINERD_BIN")).join("ctr");
    let out = Command::new(&ctr)
        .args([
            "--address",
            &kl.lab.env("CONTAINERD_ADDRESS"),
            "-n",
            "k8s.io",
        ])
        .args(["images", "label", reference, label])
        .output()
        .expect("ctr runs");
    assert!(
        out.status.success(),
        "ctr images label {reference} {label}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A check of the lab for the keeps test: an image labelled `io.cri-containerd.pinned=pinned`
/// by hand (containerd 2.3 then lists it pinned) survives the real kubelet's
/// DeleteUnusedImages under `imagefs.available` pressure (a drop-in: evict below 99 % free),
/// while an unlabelled unused image goes; once the label is removed, the eviction manager's
/// next pass (every 10 s) removes it too. Read through crictl and the kubelet's log. (The
/// agent's own runtime pins, issue 36, are what the keeps test proper needs.)
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the kubelet lab: scripts/kubelet-lab up, IMAGEKEEPER_KUBELET_LAB_ENV (scripts/test runs it)"]
async fn an_image_labelled_pinned_survives_the_real_kubelets_delete_unused_images_until_unlabelled()
{
    let mut kl = kubelet_lab("kubelet::lab::pinned_label").await;
    remove_all_images_but_the_sandbox(&kl);
    let kept = reference(&kl, "data:5mb");
    let other = reference(&kl, "data:1mb");
    kl.crictl(&["pull", &kept]);
    kl.crictl(&["pull", &other]);
    ctr_label(&kl, &kept, "io.cri-containerd.pinned=pinned");
    let listed: serde_json::Value =
        serde_json::from_str(&kl.crictl(&["images", "-o", "json"])).expect("JSON");
    let kept_id = image_id(&kl, "data:5mb");
    let other_id = image_id(&kl, "data:1mb");
    let pinned = |id: &str| {
        listed["images"]
            .as_array()
            .expect("images")
            .iter()
            .find(|i| i["id"] == id)
            .map(|i| i["pinned"].clone())
    };
    assert_eq!(pinned(&kept_id), Some(serde_json::Value::Bool(true)));
    assert_eq!(pinned(&other_id), Some(serde_json::Value::Bool(false)));

    kl.write_imagefs_pressure_drop_in();
    kl.restart();
    // The eviction manager's DeleteUnusedImages removes the unlabelled image...
    let (removal, _) = kl
        .wait_for_log_line(
            &["Removing image to free bytes", &other_id],
            0,
            Duration::from_secs(120),
        )
        .await;
    println!("{removal}");
    assert!(
        kl.log().contains("Attempting to delete unused images"),
        "by the eviction manager's DeleteUnusedImages"
    );
    let listed = kl.crictl_image_ids();
    assert!(!listed.contains(&other_id), "{listed:?}");
    assert!(
        listed.contains(&kept_id),
        "the pinned image stays: {listed:?}"
    );
    assert!(
        !kl.log().contains(&format!("imageID=\"{kept_id}\"")),
        "the kubelet never tried to remove the pinned image"
    );
    // ...and, once the label is gone, the pinned one at a later pass.
    let from = kl.log().len();
    ctr_label(&kl, &kept, "io.cri-containerd.pinned=");
    let (removal, _) = kl
        .wait_for_log_line(
            &["Removing image to free bytes", &kept_id],
            from,
            Duration::from_secs(120),
        )
        .await;
    println!("{removal}");
    support::wait_for(
        "crictl to list the unlabelled image no more",
        Duration::from_secs(30),
        || async { (!kl.crictl_image_ids().contains(&kept_id)).then_some(()) },
    )
    .await;
}
