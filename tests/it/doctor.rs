//! `imagekeeper doctor` as a process over real KubeletConfiguration files: the kubelet's
//! defaults (a kubeadm-style file), a conflicting file, a clean one, invalid and missing ones,
//! imagekeeper's own settings from flags and `--config`, and the runtime's answers through the
//! in-process fake CRI server (or no runtime at all).

use crate::support::agent::AgentFixture;
use crate::support::bin;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use imagekeeper::model::{ImageId, RuntimeImage};
use serde_json::Value;

/// A kubeadm-written kubelet config: the defaults for everything the doctor reads, plus the
/// fields it ignores.
const KUBEADM_DEFAULT: &str = "\
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  anonymous:
    enabled: false
  webhook:
    cacheTTL: 0s
    enabled: true
  x509:
    clientCAFile: /etc/kubernetes/pki/ca.crt
authorization:
  mode: Webhook
cgroupDriver: systemd
clusterDNS:
- 10.96.0.10
clusterDomain: cluster.local
containerRuntimeEndpoint: \"\"
cpuManagerReconcilePeriod: 0s
evictionPressureTransitionPeriod: 0s
fileCheckFrequency: 0s
healthzBindAddress: 127.0.0.1
healthzPort: 10248
httpCheckFrequency: 0s
imageMaximumGCAge: 0s
imageMinimumGCAge: 0s
logging:
  flushFrequency: 0
  options:
    json:
      infoBufferSize: \"0\"
  verbosity: 0
memorySwap: {}
nodeStatusReportFrequency: 0s
nodeStatusUpdateFrequency: 0s
rotateCertificates: true
runtimeRequestTimeout: 0s
shutdownGracePeriod: 0s
staticPodPath: /etc/kubernetes/manifests
streamingConnectionIdleTimeout: 0s
syncFrequency: 0s
volumeStatsAggPeriod: 0s
";

/// Every check in conflict with imagekeeper at `--image-gc-high-threshold 80`.
const CONFLICTING: &str = "\
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
evictionHard:
  memory.available: 100Mi
  imagefs.available: 25%
  nodefs.available: 10%
imageGCHighThresholdPercent: 75
imageGCLowThresholdPercent: 70
imageMaximumGCAge: 12h
containerRuntimeEndpoint: unix:///var/run/crio/crio.sock
imagePullCredentialsVerificationPolicy: NeverVerify
";

/// Beside imagekeeper at 80/70 on containerd: no conflict.
const CLEAN: &str = "\
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
evictionHard:
  memory.available: 100Mi
  imagefs.available: 10%
  nodefs.available: 5%
imageGCHighThresholdPercent: 88
imageGCLowThresholdPercent: 84
imagePullCredentialsVerificationPolicy: AlwaysVerify
featureGates:
  KubeletEnsureSecretPulledImages: true
";

struct Files {
    dir: tempfile::TempDir,
}

impl Files {
    fn new() -> Files {
        Files {
            dir: tempfile::tempdir().expect("tempdir"),
        }
    }

    fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::write(&path, text).expect("write fixture");
        path
    }

    /// An endpoint where nothing listens.
    fn dead_endpoint(&self) -> String {
        format!(
            "unix://{}",
            self.dir.path().join("no-runtime.sock").display()
        )
    }
}

fn doctor(kubelet_config: &Path, args: &[&str]) -> Output {
    bin::output(
        bin::imagekeeper()
            .arg("doctor")
            .arg("--kubelet-config")
            .arg(kubelet_config)
            .args(args),
    )
}

async fn doctor_async(kubelet_config: PathBuf, args: Vec<String>) -> Output {
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        doctor(&kubelet_config, &args)
    })
    .await
    .expect("doctor thread")
}

fn json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}): {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// check name -> status.
fn statuses(report: &Value) -> Vec<(String, String)> {
    report["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .map(|f| {
            (
                f["check"].as_str().expect("check").to_owned(),
                f["status"].as_str().expect("status").to_owned(),
            )
        })
        .collect()
}

fn status_of(report: &Value, check: &str) -> String {
    statuses(report)
        .into_iter()
        .find(|(c, _)| c == check)
        .map(|(_, s)| s)
        .unwrap_or_else(|| panic!("no {check} in {report:#}"))
}

fn image(id: &str, tag: &str, pinned: bool) -> RuntimeImage {
    RuntimeImage {
        id: ImageId::new(id),
        repo_tags: vec![tag.to_owned()],
        size: 1000,
        pinned,
        ..RuntimeImage::default()
    }
}

#[test]
fn the_kubelets_defaults_beside_imagekeepers_defaults_are_two_conflicts() {
    let files = Files::new();
    let endpoint = files.dead_endpoint();
    // The same runtime on both sides, where nothing answers (the pinned check needs one).
    let config = files.write(
        "config.yaml",
        &KUBEADM_DEFAULT.replace(
            "containerRuntimeEndpoint: \"\"",
            &format!("containerRuntimeEndpoint: {endpoint}"),
        ),
    );
    let out = doctor(&config, &["--container-runtime-endpoint", &endpoint]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stdout.contains("conflict     eviction-hard-imagefs"),
        "{stdout}"
    );
    assert!(stdout.contains("15% evicts at 85% used"), "{stdout}");
    assert!(
        stdout.contains("fix: set imagekeeper's --image-gc-high-threshold"),
        "{stdout}"
    );
    assert!(
        stdout.contains("conflict     image-gc-thresholds"),
        "{stdout}"
    );
    assert!(stdout.contains("not_checked  pinned-images"), "{stdout}");
    assert!(stdout.contains("2 conflict(s)"), "{stdout}");
    assert!(
        stderr.contains("2 conflict(s) between the kubelet's configuration and imagekeeper's"),
        "{stderr}"
    );
    // The kubeadm file's `containerRuntimeEndpoint: ""` is the kubelet's default, containerd.
    let config = files.write("kubeadm.yaml", KUBEADM_DEFAULT);
    let out = doctor(
        &config,
        &["-o", "json", "--container-runtime-endpoint", &endpoint],
    );
    let report = json(&out);
    assert_eq!(status_of(&report, "runtime-endpoints"), "conflict");
    let out = doctor(&config, &["-o", "json"]);
    let report = json(&out);
    assert_eq!(status_of(&report, "runtime-endpoints"), "ok", "{report:#}");
}

#[test]
fn a_conflicting_kubelet_config_reports_every_conflict_with_its_fix_as_json() {
    let files = Files::new();
    let config = files.write("kubelet.yaml", CONFLICTING);
    let endpoint = files.dead_endpoint();
    let out = doctor(
        &config,
        &[
            "--image-gc-high-threshold",
            "80",
            "--image-gc-low-threshold",
            "70",
            "--image-maximum-gc-age",
            "24h",
            "--container-runtime-endpoint",
            &endpoint,
            "--pulls-with-credentials",
            "--output",
            "json",
        ],
    );
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let report = json(&out);
    assert_eq!(report["kubelet_config"], config.display().to_string());
    for check in [
        "eviction-hard-imagefs",
        "image-gc-thresholds",
        "image-maximum-gc-age",
        "runtime-endpoints",
        "image-pull-credentials-verification",
    ] {
        assert_eq!(status_of(&report, check), "conflict", "{check}: {report:#}");
    }
    assert_eq!(status_of(&report, "eviction-hard-nodefs"), "ok");
    assert_eq!(status_of(&report, "pinned-images"), "not_checked");
    assert_eq!(report["conflicts"], 5);
    for finding in report["findings"].as_array().expect("findings") {
        let conflict = finding["status"] == "conflict";
        assert_eq!(conflict, finding["fix"].is_string(), "{finding:#}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_pair_of_configurations_exits_0() {
    // The image filesystem is reported (the doctor says where it is).
    let AgentFixture { fake, .. } = AgentFixture::builder()
        .images([
            image("sha256:pause", "registry.k8s.io/pause:3.10", true),
            image("sha256:app", "example.com/app:1", false),
        ])
        .image_fs_used(0)
        .start()
        .await;
    let files = Files::new();
    let config = files.write(
        "kubelet.yaml",
        &format!("{CLEAN}containerRuntimeEndpoint: {}\n", fake.endpoint()),
    );
    let out = doctor_async(
        config,
        vec![
            "--image-gc-high-threshold".into(),
            "80".into(),
            "--image-gc-low-threshold".into(),
            "70".into(),
            "--container-runtime-endpoint".into(),
            fake.endpoint(),
            "--pulls-with-credentials".into(),
            "-o".into(),
            "json".into(),
        ],
    )
    .await;
    let report = json(&out);
    assert_eq!(out.status.code(), Some(0), "{report:#}");
    assert_eq!(report["conflicts"], 0);
    for (check, status) in statuses(&report) {
        if check == "runtime-pins" {
            // The fake runtime is not containerd: runtime pins cannot be on, and doctor says
            // what that means.
            assert_eq!(status, "not_checked", "{report:#}");
            continue;
        }
        assert_eq!(status, "ok", "{check}: {report:#}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runtime_that_reports_no_pinned_image_conflicts_without_pin_patterns() {
    let AgentFixture { fake, .. } = AgentFixture::builder()
        .images([
            image("sha256:pause", "registry.k8s.io/pause:3.10", false),
            image("sha256:app", "example.com/app:1", false),
        ])
        .start()
        .await;
    let files = Files::new();
    let config = files.write(
        "kubelet.yaml",
        &format!("{CLEAN}containerRuntimeEndpoint: {}\n", fake.endpoint()),
    );
    let base = vec![
        "--image-gc-high-threshold".to_owned(),
        "80".to_owned(),
        "--image-gc-low-threshold".to_owned(),
        "70".to_owned(),
        "--container-runtime-endpoint".to_owned(),
        fake.endpoint(),
        "-o".to_owned(),
        "json".to_owned(),
    ];
    let out = doctor_async(config.clone(), base.clone()).await;
    let report = json(&out);
    assert_eq!(out.status.code(), Some(1), "{report:#}");
    assert_eq!(
        status_of(&report, "pinned-images"),
        "conflict",
        "{report:#}"
    );
    assert!(
        fake.calls("ListImages") >= 1,
        "the doctor asked the runtime"
    );

    let mut pinned = base;
    pinned.extend([
        "--pinned-image".to_owned(),
        "registry.k8s.io/pause:*".to_owned(),
    ]);
    let out = doctor_async(config, pinned).await;
    let report = json(&out);
    assert_eq!(out.status.code(), Some(0), "{report:#}");
    assert_eq!(status_of(&report, "pinned-images"), "ok");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quantity_threshold_is_judged_against_the_image_filesystems_capacity() {
    let AgentFixture { fake, .. } = AgentFixture::builder()
        .images([image("sha256:pause", "registry.k8s.io/pause:3.10", true)])
        .image_fs_used(1000)
        .start()
        .await;
    let files = Files::new();
    let args = |endpoint: String| {
        vec![
            "--image-gc-high-threshold".to_owned(),
            "80".to_owned(),
            "--image-gc-low-threshold".to_owned(),
            "70".to_owned(),
            "--container-runtime-endpoint".to_owned(),
            endpoint,
            "-o".to_owned(),
            "json".to_owned(),
        ]
    };
    // More than any test filesystem holds: eviction at 0% used.
    let huge = files.write(
        "huge.yaml",
        &format!(
            "{}containerRuntimeEndpoint: {}\nevictionHard:\n  imagefs.available: 1Ei\n",
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nimageGCHighThresholdPercent: 90\nimageGCLowThresholdPercent: 85\n",
            fake.endpoint()
        ),
    );
    let report = json(&doctor_async(huge.clone(), args(fake.endpoint())).await);
    assert_eq!(
        status_of(&report, "eviction-hard-imagefs"),
        "conflict",
        "{report:#}"
    );
    // One byte: eviction only when the filesystem is full.
    let tiny = files.write(
        "tiny.yaml",
        &std::fs::read_to_string(&huge)
            .expect("read")
            .replace("1Ei", "1"),
    );
    let report = json(&doctor_async(tiny, args(fake.endpoint())).await);
    assert_eq!(
        status_of(&report, "eviction-hard-imagefs"),
        "ok",
        "{report:#}"
    );
    // No runtime: the quantity cannot be judged, and the doctor says so.
    let report = json(&doctor_async(huge, args(files.dead_endpoint())).await);
    assert_eq!(
        status_of(&report, "eviction-hard-imagefs"),
        "not_checked",
        "{report:#}"
    );
}

#[test]
fn imagekeepers_settings_come_from_its_config_file_too() {
    let files = Files::new();
    let kubelet = files.write("kubelet.yaml", KUBEADM_DEFAULT);
    let ours = files.write(
        "imagekeeper.toml",
        "imageGCHighThresholdPercent = 80\nimageGCLowThresholdPercent = 70\n",
    );
    let endpoint = files.dead_endpoint();
    let out = doctor(
        &kubelet,
        &[
            "--config",
            ours.to_str().expect("utf8"),
            "--container-runtime-endpoint",
            &endpoint,
            "-o",
            "json",
        ],
    );
    let report = json(&out);
    assert_eq!(
        status_of(&report, "eviction-hard-imagefs"),
        "ok",
        "{report:#}"
    );
    assert_eq!(
        status_of(&report, "image-gc-thresholds"),
        "ok",
        "{report:#}"
    );
}

#[test]
fn an_invalid_or_missing_kubelet_config_exits_2_naming_the_problem() {
    let files = Files::new();
    let header = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";
    let cases = [
        (
            "not-yaml.yaml",
            "{ this is: [not yaml".to_owned(),
            "is not valid YAML",
        ),
        (
            "bad-threshold.yaml",
            format!("{header}imageGCHighThresholdPercent: 150\n"),
            "imageGCHighThresholdPercent: invalid configuration: imageGCHighThresholdPercent (--image-gc-high-threshold) 150 must be between 0 and 100, inclusive",
        ),
        (
            "bad-eviction.yaml",
            format!("{header}evictionHard:\n  imagefs.available: lots\n"),
            "evictionHard.imagefs.available: \"lots\" is not a quantity",
        ),
        (
            "bad-policy.yaml",
            format!("{header}imagePullCredentialsVerificationPolicy: Sometimes\n"),
            "imagePullCredentialsVerificationPolicy: \"Sometimes\" is not one of",
        ),
        (
            "pod.yaml",
            "apiVersion: v1\nkind: Pod\n".to_owned(),
            "kind: \"Pod\" is not KubeletConfiguration",
        ),
        ("empty.yaml", String::new(), "is empty"),
    ];
    for (name, text, want) in cases {
        let path = files.write(name, &text);
        let out = doctor(&path, &[]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{name}: {stderr}");
        assert!(stderr.contains(want), "{name}: {stderr}");
        assert!(
            out.stdout.is_empty(),
            "{name}: no report for an invalid file"
        );
    }
    let missing = files.dir.path().join("absent.yaml");
    let out = doctor(&missing, &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("cannot read the kubelet config") && stderr.contains("absent.yaml"),
        "{stderr}"
    );
    let out = doctor(files.dir.path(), &[]);
    assert_eq!(out.status.code(), Some(2), "a directory: {out:?}");

    // A FIFO is refused without being opened (opening it would wait for a writer).
    let fifo = files.dir.path().join("fifo.yaml");
    let c_path = std::ffi::CString::new(fifo.to_str().expect("utf8")).expect("no NUL");
    // SAFETY: mkfifo(3) with a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0, "mkfifo");
    let out = doctor(&fifo, &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("not a regular file"), "{stderr}");

    // Larger than any real kubelet config: refused unread.
    let big = files.write("big.yaml", &format!("{header}# {}\n", "x".repeat(2 << 20)));
    let out = doctor(&big, &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("larger than 1048576 bytes"), "{stderr}");
}

#[test]
fn an_invalid_imagekeeper_setting_exits_2() {
    let files = Files::new();
    let config = files.write("kubelet.yaml", KUBEADM_DEFAULT);
    let out = doctor(&config, &["--image-gc-high-threshold", "101"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--image-gc-high-threshold"), "{stderr}");
}

/// Issue 24: `doctor --kubelet-config-dir DIR` reads the kubelet's drop-ins (`*.conf`, merged
/// over `--kubelet-config` in lexical order, as the kubelet's `--config-dir`): one turning the
/// EventedPLEG gate on makes the container-events check a conflict (the file alone is ok), a
/// later one setting the locked ImageMaximumGCAge gate false is refused with exit 2 naming the
/// field and the drop-in directory.
#[test]
fn the_kubelet_config_dirs_drop_ins_are_merged_over_the_file() {
    let files = Files::new();
    let config = files.write("kubelet.yaml", KUBEADM_DEFAULT);
    let drop_ins = files.dir.path().join("kubelet.conf.d");
    std::fs::create_dir(&drop_ins).expect("mkdir");
    let header = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";
    std::fs::write(
        drop_ins.join("10-pleg.conf"),
        format!("{header}featureGates:\n  EventedPLEG: true\n"),
    )
    .expect("write");
    // Not *.conf: not read (it would be refused).
    std::fs::write(
        drop_ins.join("20-gate.yaml"),
        format!("{header}featureGates:\n  ImageMaximumGCAge: false\n"),
    )
    .expect("write");
    let dir_arg = drop_ins.to_str().expect("utf8");
    let report = json(&doctor(&config, &["-o", "json"]));
    assert_eq!(status_of(&report, "container-events"), "ok", "{report:#}");
    let report = json(&doctor(
        &config,
        &["-o", "json", "--kubelet-config-dir", dir_arg],
    ));
    assert_eq!(
        status_of(&report, "container-events"),
        "conflict",
        "{report:#}"
    );

    std::fs::rename(drop_ins.join("20-gate.yaml"), drop_ins.join("20-gate.conf")).expect("mv");
    let out = doctor(&config, &["--kubelet-config-dir", dir_arg]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("featureGates.ImageMaximumGCAge")
            && stderr.contains(
                "cannot set feature gate ImageMaximumGCAge to false, feature is locked to true"
            )
            && stderr.contains(dir_arg),
        "{stderr}"
    );
    assert!(out.stdout.is_empty(), "no report for an invalid config");
}

/// Issue 24: doctor reads the kubelet's pull intents under `--kubelet-root-dir` and names one
/// older than `kubeletIntentMaxAge` (by its file's modification time): the same intent
/// written now is not named, written 48 h ago it is.
#[test]
fn doctor_names_a_stale_kubelet_pull_intent_under_the_kubelet_root_dir() {
    let files = Files::new();
    let config = files.write("kubelet.yaml", KUBEADM_DEFAULT);
    let root = files.dir.path().join("kubelet");
    let pulling = root.join("image_manager/pulling");
    std::fs::create_dir_all(&pulling).expect("mkdir");
    let intent = pulling.join(imagekeeper::kubelet::record_file_name("busybox:1.36"));
    std::fs::write(
        &intent,
        r#"{"kind":"ImagePullIntent","apiVersion":"kubelet.config.k8s.io/v1beta1","image":"busybox:1.36"}"#,
    )
    .expect("write the intent");
    let root_arg = format!("--kubelet-root-dir={}", root.display());
    let finding = |args: &[&str]| {
        let report = json(&doctor(&config, args));
        report["findings"]
            .as_array()
            .expect("findings")
            .iter()
            .find(|f| f["check"] == "kubelet-pull-intents")
            .cloned()
            .unwrap_or_else(|| panic!("no kubelet-pull-intents in {report:#}"))
    };
    let fresh = finding(&["-o", "json", &root_arg]);
    assert_eq!(fresh["status"], "ok", "{fresh:#}");
    assert!(
        fresh["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("no kubelet pull intent")),
        "{fresh:#}"
    );
    let two_days_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(48 * 3600);
    std::fs::File::options()
        .write(true)
        .open(&intent)
        .and_then(|f| f.set_modified(two_days_ago))
        .expect("set the intent's mtime");
    let stale = finding(&["-o", "json", &root_arg]);
    assert_eq!(stale["status"], "ok", "{stale:#}");
    assert!(
        stale["message"].as_str().is_some_and(|m| m
            .contains("1 kubelet pull intent(s) are older than kubeletIntentMaxAge")
            && m.contains("\"busybox:1.36\"")),
        "{stale:#}"
    );
}

/// Doctor lists the kubelet's observed preloaded records under `--kubelet-root-dir`
/// (`kubelet-preloaded-records`, kubelet master `image_manager/observed-preloaded/`,
/// pkg/kubelet/images/pullmanager/fs_pullrecords.go) with the damaged files skipped, never as
/// a conflict; none (no directory: the kubelet creates it at its first such record) is ok, an
/// empty root is not_checked. The text report shows the same finding.
#[test]
fn doctor_lists_the_kubelets_observed_preloaded_records_and_the_damaged_ones() {
    let files = Files::new();
    let config = files.write("kubelet.yaml", KUBEADM_DEFAULT);
    let root = files.dir.path().join("kubelet");
    std::fs::create_dir_all(root.join("image_manager/pulled")).expect("mkdir");
    let root_arg = format!("--kubelet-root-dir={}", root.display());
    let finding = |args: &[&str]| {
        let report = json(&doctor(&config, args));
        report["findings"]
            .as_array()
            .expect("findings")
            .iter()
            .find(|f| f["check"] == "kubelet-preloaded-records")
            .cloned()
            .unwrap_or_else(|| panic!("no kubelet-preloaded-records in {report:#}"))
    };
    let none = finding(&["-o", "json", &root_arg]);
    assert_eq!(none["status"], "ok", "{none:#}");
    assert_eq!(
        none["message"], "the kubelet has no observed preloaded record",
        "{none:#}"
    );
    let off = finding(&["-o", "json", "--kubelet-root-dir="]);
    assert_eq!(off["status"], "not_checked", "{off:#}");

    let dir = root.join("image_manager/observed-preloaded");
    std::fs::create_dir_all(&dir).expect("mkdir");
    let image_ref = "sha256:1111111111111111111111111111111111111111111111111111111111111111";
    std::fs::write(
        dir.join(imagekeeper::kubelet::record_file_name(image_ref)),
        format!(
            r#"{{"kind":"ImagePreloadedRecord","apiVersion":"kubelet.config.k8s.io/v1beta1","imageRef":"{image_ref}","observedImages":{{"registry.example/app":{{}}}}}}"#
        ),
    )
    .expect("write the record");
    std::fs::write(dir.join("sha256-00"), b"{").expect("write a damaged one");
    let listed = finding(&["-o", "json", &root_arg]);
    assert_eq!(listed["status"], "ok", "{listed:#}");
    let message = listed["message"].as_str().expect("message");
    assert!(
        message.starts_with("the kubelet observed 1 image(s) preloaded")
            && message.contains(&format!("{image_ref} as \"registry.example/app\""))
            && message.contains("counts this as no use")
            && message.contains("1 observed preloaded record file(s) skipped")
            && message.contains("sha256-00"),
        "{listed:#}"
    );
    let text = doctor(&config, &[&root_arg]);
    let stdout = String::from_utf8_lossy(&text.stdout);
    assert!(
        stdout.contains("kubelet-preloaded-records")
            && stdout.contains("the kubelet observed 1 image(s) preloaded"),
        "{stdout}"
    );
}

/// `doctor` asks the running agent how its cluster signals' watches fare (issue 55): with
/// `clusterSignals` on and no API server credentials the agent runs no watch, a conflict naming
/// the cause; with an API server that answers every list with garbage, the watch's failure is a
/// conflict naming the pods' watch and its errors, while the agent runs on. Each agent is a
/// real `imagekeeper run` against the fake runtime; doctor reads it on its admin socket.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_says_when_the_agents_cluster_signals_run_no_watch_or_their_watch_fails() {
    use crate::node_events::{FirstAnswer, misbehaving_api_server};
    let AgentFixture {
        fake, dir, socket, ..
    } = AgentFixture::builder().image_fs_used(0).start().await;
    let (address, _first, _requests) = misbehaving_api_server(FirstAnswer::NotJson).await;
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: stub\n  cluster: {{server: \"http://{address}\"}}\n\
             users:\n- name: stub\n  user: {{}}\ncontexts:\n- name: stub\n  context: {{cluster: stub, user: stub}}\n\
             current-context: stub\n"
        ),
    )
    .expect("kubeconfig");
    let files = Files::new();
    let kubelet = files.write(
        "kubelet.yaml",
        &format!("{CLEAN}containerRuntimeEndpoint: {}\n", fake.endpoint()),
    );
    // (the agent's KUBECONFIG, what doctor must say)
    let cases = [
        (dir.path().join("no-such-kubeconfig"), "runs no watch"),
        (kubeconfig, "the watch of the pods bound to this node ("),
    ];
    for (i, (kubeconfig, want)) in cases.into_iter().enumerate() {
        let db = dir.path().join(format!("records-{i}.redb"));
        let socket = socket.with_file_name(format!("admin-{i}.sock"));
        let mut agent = std::process::Command::new(env!("CARGO_BIN_EXE_imagekeeper"))
            .args(["run", "--container-runtime-endpoint", &fake.endpoint()])
            .arg("--db")
            .arg(&db)
            .arg("--admin-socket")
            .arg(&socket)
            // No probe listener: the default one (127.0.0.1:9898) is the DaemonSet's port,
            // which a lab test's pod binds on this host at the same time.
            .args([
                "--gc-period",
                "1h",
                "--healthz-address=",
                "--set",
                "clusterSignals=true",
            ])
            .env("NODE_NAME", "node-a")
            .env("KUBECONFIG", &kubeconfig)
            .env("HOME", dir.path())
            .env_remove("KUBERNETES_SERVICE_HOST")
            .env_remove("KUBERNETES_SERVICE_PORT")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("spawn the agent");
        let args: Vec<String> = [
            "--set",
            "clusterSignals=true",
            "--admin-socket",
            socket.to_str().expect("utf8"),
            "--container-runtime-endpoint",
            &fake.endpoint(),
            "-o",
            "json",
        ]
        .map(str::to_owned)
        .to_vec();
        // The agent serves its admin socket once started: a failing API server holds its
        // start up to 30 s, waiting for the first list of the bound pods.
        let finding = crate::support::wait_for(
            &format!("doctor's cluster-signals finding with {want:?}"),
            Duration::from_secs(90),
            || {
                let (kubelet, args) = (kubelet.clone(), args.clone());
                async move {
                    let report = json(&doctor_async(kubelet, args).await);
                    let finding = report["findings"]
                        .as_array()
                        .expect("findings")
                        .iter()
                        .find(|f| f["check"] == "cluster-signals")
                        .cloned()
                        .expect("a cluster-signals finding");
                    if finding["message"]
                        .as_str()
                        .is_some_and(|m| m.contains(want))
                    {
                        return Some(finding);
                    }
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    None
                }
            },
        )
        .await;
        assert_eq!(finding["status"], "conflict", "{finding:#}");
        assert!(finding["fix"].is_string(), "{finding:#}");
        assert_eq!(
            agent.try_wait().expect("the agent's status"),
            None,
            "the agent runs on: {finding:#}"
        );
        let _ = agent.kill();
        let _ = agent.wait();
    }
}
