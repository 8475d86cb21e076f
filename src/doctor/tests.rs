//! The checks, case by case, over parsed KubeletConfiguration text and resolved imagekeeper
//! settings.

use super::*;
use crate::config::{FileConfig, FlagValues};
use crate::model::ImageId;

const HEADER: &str = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";

fn kubelet(body: &str) -> KubeletConfig {
    KubeletConfig::parse(&format!("{HEADER}{body}"), "/k.yaml").expect("valid kubelet config")
}

fn ours(flags: FlagValues) -> AgentConfig {
    AgentConfig::resolve(&FileConfig::default(), None, &flags).expect("valid imagekeeper config")
}

fn thresholds(high: i64, low: i64) -> FlagValues {
    FlagValues {
        image_gc_high_threshold: Some(high),
        image_gc_low_threshold: Some(low),
        ..FlagValues::default()
    }
}

fn image(id: &str, pinned: bool) -> RuntimeImage {
    RuntimeImage {
        id: ImageId::new(id),
        repo_tags: vec![format!("{id}:1")],
        size: 10,
        pinned,
        ..RuntimeImage::default()
    }
}

fn unreachable() -> RuntimeView {
    RuntimeView::Unreachable("connection refused".to_owned())
}

fn run(k: &KubeletConfig, ik: &AgentConfig, runtime: &RuntimeView, creds: bool) -> Vec<Finding> {
    check(&DoctorInput {
        kubelet: k,
        imagekeeper: ik,
        pulls_with_credentials: creds,
        runtime,
        stale_intents: Some(&[]),
        kubelet_preloaded: None,
        images_on_nodefs: None,
        runtime_sandbox_image: None,
        now: UnixNanos::from_secs(1_800_000_000),
        runtime_pins: None,
        cluster_signals: None,
    })
}

fn find<'a>(findings: &'a [Finding], name: &str) -> &'a Finding {
    findings
        .iter()
        .find(|f| f.check == name)
        .unwrap_or_else(|| panic!("no finding {name} in {findings:#?}"))
}

#[test]
fn defaults_on_both_sides_sit_on_the_eviction_line_and_the_kubelets_gc() {
    let findings = run(
        &kubelet(""),
        &ours(FlagValues::default()),
        &unreachable(),
        false,
    );
    let eviction = find(&findings, "eviction-hard-imagefs");
    assert_eq!(eviction.status, Status::Conflict, "{eviction:?}");
    assert!(
        eviction.message.contains("15% evicts at 85% used"),
        "{eviction:?}"
    );
    assert!(
        eviction.message.contains("DeleteUnusedImages"),
        "{eviction:?}"
    );
    let fix = eviction.fix.as_deref().unwrap_or_default();
    assert!(
        fix.contains("below 85%")
            && fix.contains("--image-gc-high-threshold 80 --image-gc-low-threshold 70"),
        "the book's values (beside-the-kubelet.md): {eviction:?}"
    );
    assert_eq!(
        find(&findings, "image-gc-thresholds").status,
        Status::Conflict
    );
    // nodefs 10% evicts at 90%, above 85.
    assert_eq!(find(&findings, "eviction-hard-nodefs").status, Status::Ok);
    assert_eq!(find(&findings, "pinned-images").status, Status::NotChecked);
    assert_eq!(conflicts(&findings), 2);
    for f in &findings {
        assert_eq!(f.status == Status::Conflict, f.fix.is_some(), "{f:?}");
    }
}

#[test]
fn the_readmes_recommended_values_pass_beside_the_kubelets_defaults() {
    let findings = run(
        &kubelet(""),
        &ours(thresholds(80, 70)),
        &RuntimeView::Reached {
            images: vec![image("sha256:a", true)],
            image_fs: Err("not asked".to_owned()),
        },
        false,
    );
    assert_eq!(conflicts(&findings), 0, "{findings:#?}");
}

#[test]
fn eviction_lines_at_or_below_imagekeepers_high_threshold_conflict() {
    // (kubelet body, imagekeeper high, want conflict)
    let cases = [
        ("evictionHard:\n  imagefs.available: 20%\n", 80, true),
        ("evictionHard:\n  imagefs.available: 20%\n", 79, false),
        ("evictionHard:\n  imagefs.available: 7.5%\n", 92, false),
        ("evictionHard:\n  imagefs.available: 7.5%\n", 93, true),
        ("evictionHard:\n  imagefs.available: 0%\n", 99, false),
    ];
    for (body, high, want) in cases {
        let findings = run(
            &kubelet(body),
            &ours(thresholds(high, 10)),
            &unreachable(),
            false,
        );
        let f = find(&findings, "eviction-hard-imagefs");
        assert_eq!(
            f.status == Status::Conflict,
            want,
            "{body} high {high}: {f:?}"
        );
    }
}

#[test]
fn soft_and_nodefs_thresholds_are_checked_too() {
    let findings = run(
        &kubelet(
            "evictionSoft:\n  imagefs.available: 25%\nevictionHard:\n  nodefs.available: 30%\n",
        ),
        &ours(thresholds(75, 60)),
        &unreachable(),
        false,
    );
    let soft = find(&findings, "eviction-soft-imagefs");
    assert_eq!(soft.status, Status::Conflict, "{soft:?}");
    assert!(soft.message.contains("grace period"), "{soft:?}");
    let nodefs = find(&findings, "eviction-hard-nodefs");
    assert_eq!(nodefs.status, Status::Conflict, "{nodefs:?}");
    assert!(nodefs.message.contains("root filesystem"), "{nodefs:?}");
    // evictionHard without imagefs.available: that signal is off.
    assert_eq!(find(&findings, "eviction-hard-imagefs").status, Status::Ok);
}

#[test]
fn a_quantity_threshold_is_judged_against_the_capacity_or_not_at_all() {
    let k = kubelet("evictionHard:\n  imagefs.available: 10Gi\n");
    let ik = ours(thresholds(80, 70));
    let f = run(&k, &ik, &unreachable(), false);
    let f = find(&f, "eviction-hard-imagefs");
    assert_eq!(f.status, Status::NotChecked, "{f:?}");
    assert!(f.message.contains("capacity"), "{f:?}");

    let with_capacity = |capacity: u64| RuntimeView::Reached {
        images: vec![],
        image_fs: Ok(ImageFsStats::new(
            "/var/lib/containerd",
            0,
            capacity,
            capacity,
        )),
    };
    // 10Gi of 40Gi is 25%: eviction at 75% used, below 80.
    let findings = run(&k, &ik, &with_capacity(40 << 30), false);
    let f = find(&findings, "eviction-hard-imagefs");
    assert_eq!(f.status, Status::Conflict, "{f:?}");
    assert!(f.message.contains("25%"), "{f:?}");
    // 10Gi of 200Gi is 5%: eviction at 95% used, above 80.
    let findings = run(&k, &ik, &with_capacity(200 << 30), false);
    assert_eq!(find(&findings, "eviction-hard-imagefs").status, Status::Ok);
}

#[test]
fn the_kubelets_gc_thresholds_at_or_below_imagekeepers_conflict() {
    for (body, want) in [
        (
            "imageGCHighThresholdPercent: 80\nimageGCLowThresholdPercent: 70\n",
            Status::Conflict,
        ),
        (
            "imageGCHighThresholdPercent: 81\nimageGCLowThresholdPercent: 70\n",
            Status::Ok,
        ),
        (
            "imageGCHighThresholdPercent: 100\nimageGCLowThresholdPercent: 70\n",
            Status::Ok,
        ),
    ] {
        let findings = run(
            &kubelet(body),
            &ours(thresholds(80, 70)),
            &unreachable(),
            false,
        );
        let f = find(&findings, "image-gc-thresholds");
        assert_eq!(f.status, want, "{body}: {f:?}");
    }
}

/// A kubelet at high 100 turns its image GC off only with imageMaximumGCAge 0
/// (pkg/kubelet/kubelet.go, StartGarbageCollection): with MaxAge set its space pass runs on a
/// full disk, so the doctor compares the thresholds as for any other value.
#[test]
fn a_kubelet_at_high_100_with_max_age_still_has_a_space_pass() {
    let check = |body: &str, ours_high: i64| {
        let findings = run(
            &kubelet(body),
            &ours(thresholds(ours_high, 70)),
            &unreachable(),
            false,
        );
        find(&findings, "image-gc-thresholds").clone()
    };
    let off = check("imageGCHighThresholdPercent: 100\n", 100);
    assert_eq!(off.status, Status::Ok, "{off:?}");
    assert!(off.message.contains("image GC never runs"), "{off:?}");
    let body = "imageGCHighThresholdPercent: 100\nimageMaximumGCAge: 168h\n";
    let on = check(body, 80);
    assert_eq!(on.status, Status::Ok, "{on:?}");
    assert!(!on.message.contains("never runs"), "{on:?}");
    let both_at_100 = check(body, 100);
    assert_eq!(both_at_100.status, Status::Conflict, "{both_at_100:?}");
}

#[test]
fn a_kubelet_max_age_not_longer_than_imagekeepers_conflicts() {
    let ik_flags = |max_age: &str| FlagValues {
        image_maximum_gc_age: Some(max_age.to_owned()),
        ..thresholds(80, 70)
    };
    for (body, ours_max, want) in [
        ("", "0s", Status::Ok),
        ("imageMaximumGCAge: 24h\n", "0s", Status::Conflict),
        ("imageMaximumGCAge: 24h\n", "48h", Status::Conflict),
        ("imageMaximumGCAge: 24h\n", "24h", Status::Conflict),
        ("imageMaximumGCAge: 48h\n", "24h", Status::Ok),
    ] {
        let findings = run(
            &kubelet(body),
            &ours(ik_flags(ours_max)),
            &unreachable(),
            false,
        );
        let f = find(&findings, "image-maximum-gc-age");
        assert_eq!(f.status, want, "{body} / {ours_max}: {f:?}");
    }
}

#[test]
fn different_runtime_endpoints_conflict() {
    let ik = ours(FlagValues {
        container_runtime_endpoint: Some("unix:///run/containerd/containerd.sock".to_owned()),
        ..thresholds(80, 70)
    });
    for (body, want) in [
        ("", Status::Ok),
        (
            "containerRuntimeEndpoint: /run/containerd/containerd.sock\n",
            Status::Ok,
        ),
        (
            "containerRuntimeEndpoint: unix:///var/run/crio/crio.sock\n",
            Status::Conflict,
        ),
        (
            "imageServiceEndpoint: unix:///run/images.sock\n",
            Status::Conflict,
        ),
    ] {
        let findings = run(&kubelet(body), &ik, &unreachable(), false);
        let f = find(&findings, "runtime-endpoints");
        assert_eq!(f.status, want, "{body}: {f:?}");
    }
}

#[test]
fn a_lenient_verification_policy_conflicts_only_with_credentialed_pulls() {
    let ik = ours(thresholds(80, 70));
    let name = "image-pull-credentials-verification";
    for (body, creds, want) in [
        ("", true, Status::Conflict),
        ("", false, Status::NotChecked),
        (
            "imagePullCredentialsVerificationPolicy: NeverVerify\n",
            true,
            Status::Conflict,
        ),
        (
            "featureGates:\n  KubeletEnsureSecretPulledImages: false\nimagePullCredentialsVerificationPolicy: AlwaysVerify\n",
            true,
            Status::Conflict,
        ),
        (
            "imagePullCredentialsVerificationPolicy: AlwaysVerify\n",
            true,
            Status::Ok,
        ),
        (
            "imagePullCredentialsVerificationPolicy: NeverVerifyAllowlistedImages\n",
            true,
            Status::Ok,
        ),
    ] {
        let findings = run(&kubelet(body), &ik, &unreachable(), creds);
        let f = find(&findings, name);
        assert_eq!(f.status, want, "{body} creds {creds}: {f:?}");
    }
}

#[test]
fn a_runtime_that_never_reports_pinned_conflicts_without_pin_patterns() {
    let k = kubelet("");
    let none_pinned = RuntimeView::Reached {
        images: vec![image("sha256:a", false), image("sha256:b", false)],
        image_fs: Err("not asked".to_owned()),
    };
    let f = run(&k, &ours(thresholds(80, 70)), &none_pinned, false);
    assert_eq!(find(&f, "pinned-images").status, Status::Conflict);

    let with_pins = ours(FlagValues {
        pinned_images: vec!["registry.k8s.io/pause:*".to_owned()],
        ..thresholds(80, 70)
    });
    let f = run(&k, &with_pins, &none_pinned, false);
    assert_eq!(find(&f, "pinned-images").status, Status::Ok);

    let one_pinned = RuntimeView::Reached {
        images: vec![image("sha256:a", true), image("sha256:b", false)],
        image_fs: Err("not asked".to_owned()),
    };
    let f = run(&k, &ours(thresholds(80, 70)), &one_pinned, false);
    assert_eq!(find(&f, "pinned-images").status, Status::Ok);

    let f = run(&k, &ours(thresholds(80, 70)), &unreachable(), false);
    let f = find(&f, "pinned-images");
    assert_eq!(f.status, Status::NotChecked);
    assert!(f.message.contains("did not answer"), "{f:?}");
}

#[test]
fn the_readmes_alternative_a_raised_kubelet_beside_imagekeepers_defaults_passes() {
    let k = kubelet(
        "imageGCHighThresholdPercent: 90\nimageGCLowThresholdPercent: 88\nevictionHard:\n  imagefs.available: \"5%\"\nmergeDefaultEvictionSettings: true\n",
    );
    let ik = ours(FlagValues {
        pinned_images: vec!["registry.k8s.io/pause:*".to_owned()],
        ..FlagValues::default()
    });
    let findings = run(&k, &ik, &unreachable(), false);
    assert_eq!(conflicts(&findings), 0, "{findings:#?}");
}

#[test]
fn the_deploy_configs_settings_pass_beside_the_kubelets_defaults() {
    let manifest = include_str!("../../deploy/daemonset.yaml");
    let toml_lines: String = manifest
        .lines()
        .skip_while(|l| !l.contains("imagekeeper.toml: |"))
        .skip(1)
        .take_while(|l| l.starts_with("    "))
        .map(|l| format!("{}\n", l.trim_start()))
        .collect();
    let file: FileConfig = toml::from_str(&toml_lines).expect("the manifest's TOML");
    let ik = AgentConfig::resolve(&file, None, &FlagValues::default()).expect("valid");
    let findings = run(&kubelet(""), &ik, &unreachable(), false);
    assert_eq!(conflicts(&findings), 0, "{findings:#?}");
}

#[test]
fn the_inode_signals_are_reported_and_off_with_an_unmerged_eviction_hard() {
    let findings = run(
        &kubelet(""),
        &ours(FlagValues::default()),
        &unreachable(),
        false,
    );
    for name in [
        "eviction-hard-imagefs-inodes",
        "eviction-hard-nodefs-inodes",
    ] {
        let f = find(&findings, name);
        assert_eq!(f.status, Status::NotChecked, "{f:?}");
        assert!(f.message.contains("inodesFree 5%"), "{f:?}");
        assert!(f.message.contains("DeleteUnusedImages"), "{f:?}");
    }
    let findings = run(
        &kubelet(
            "evictionHard:\n  imagefs.available: 10%\nevictionSoft:\n  nodefs.inodesFree: 15%\n",
        ),
        &ours(FlagValues::default()),
        &unreachable(),
        false,
    );
    let f = find(&findings, "eviction-hard-imagefs-inodes");
    assert_eq!(f.status, Status::Ok, "{f:?}");
    assert!(f.message.contains("sets no imagefs.inodesFree"), "{f:?}");
    let f = find(&findings, "eviction-soft-nodefs-inodes");
    assert_eq!(f.status, Status::NotChecked, "{f:?}");
    assert!(
        f.message.contains("evictionSoft nodefs.inodesFree 15%"),
        "{f:?}"
    );
}

#[test]
fn always_verify_says_pods_re_pull_and_fail_while_the_registry_is_down() {
    let findings = run(
        &kubelet("imagePullCredentialsVerificationPolicy: AlwaysVerify\n"),
        &ours(FlagValues::default()),
        &unreachable(),
        true,
    );
    let f = find(&findings, "image-pull-credentials-verification");
    assert_eq!(f.status, Status::Ok);
    assert!(
        f.message
            .contains("re-pulls each image the kubelet has no pull record of")
            && f.message.contains("while the registry is down"),
        "{f:?}"
    );
    let findings = run(
        &kubelet(""),
        &ours(FlagValues::default()),
        &unreachable(),
        true,
    );
    let fix = find(&findings, "image-pull-credentials-verification")
        .fix
        .clone()
        .unwrap_or_default();
    assert!(
        fix.contains("re-pull every image the kubelet has no pull record of")
            && fix.contains("while the registry is down"),
        "{fix}"
    );
}

#[test]
fn evented_pleg_conflicts_with_imagekeepers_watcher_unless_it_is_off() {
    let off = FlagValues {
        container_events: Some("off".into()),
        ..FlagValues::default()
    };
    for (body, flags, want) in [
        ("", FlagValues::default(), Status::Ok),
        (
            "featureGates:\n  EventedPLEG: true\n",
            FlagValues::default(),
            Status::Conflict,
        ),
        (
            "featureGates:\n  EventedPLEG: true\n",
            off.clone(),
            Status::Ok,
        ),
        ("", off, Status::Ok),
    ] {
        let findings = run(&kubelet(body), &ours(flags.clone()), &unreachable(), false);
        let f = find(&findings, "container-events");
        assert_eq!(f.status, want, "{body} {flags:?}: {f:?}");
        if want == Status::Conflict {
            assert!(
                f.fix.as_deref().unwrap_or_default().contains(
                    "containerEvents = \"off\" in its config file (or --set containerEvents=off)"
                ),
                "{f:?}"
            );
        }
    }
}

#[test]
fn stale_kubelet_intents_are_shown() {
    let stale = [crate::kubelet::StaleIntent {
        image: "busybox:1.36".into(),
        file: "/var/lib/kubelet/image_manager/pulling/sha256-x".into(),
        written: crate::model::UnixNanos::from_secs(1),
        age_seconds: 48 * 3600,
        max_age_seconds: 24 * 3600,
    }];
    let (k, ik, rt) = (kubelet(""), ours(FlagValues::default()), unreachable());
    let with = |stale_intents| {
        check(&DoctorInput {
            kubelet: &k,
            imagekeeper: &ik,
            pulls_with_credentials: false,
            runtime: &rt,
            stale_intents,
            kubelet_preloaded: None,
            images_on_nodefs: None,
            runtime_sandbox_image: None,
            now: UnixNanos::from_secs(1_800_000_000),
            runtime_pins: None,
            cluster_signals: None,
        })
    };
    let findings = with(Some(&stale));
    let f = find(&findings, "kubelet-pull-intents");
    assert_eq!(f.status, Status::Ok, "{f:?}");
    assert!(
        f.message.contains("1 kubelet pull intent(s)")
            && f.message.contains("\"busybox:1.36\"")
            && f.message.contains("written 48h0m0s ago"),
        "{f:?}"
    );
    let findings = with(Some(&[]));
    assert!(
        find(&findings, "kubelet-pull-intents")
            .message
            .contains("no kubelet pull intent")
    );
    let findings = with(None);
    assert_eq!(
        find(&findings, "kubelet-pull-intents").status,
        Status::NotChecked
    );
}

fn run_on(
    k: &KubeletConfig,
    ik: &AgentConfig,
    runtime: &RuntimeView,
    images_on_nodefs: Option<bool>,
) -> Vec<Finding> {
    check(&DoctorInput {
        kubelet: k,
        imagekeeper: ik,
        pulls_with_credentials: false,
        runtime,
        stale_intents: Some(&[]),
        kubelet_preloaded: None,
        images_on_nodefs,
        runtime_sandbox_image: None,
        now: UnixNanos::from_secs(1_800_000_000),
        runtime_pins: None,
        cluster_signals: None,
    })
}

/// Issue 28: a nodefs signal is a conflict only when the images are on nodefs; with a
/// dedicated image filesystem it removes no image.
#[test]
fn a_nodefs_signal_is_no_conflict_when_the_images_are_not_on_nodefs() {
    // The kubelet's default nodefs.available 10% evicts at 90% used.
    let k = kubelet("");
    let ik = ours(thresholds(92, 80));
    for (on_nodefs, want) in [
        (Some(true), Status::Conflict),
        (None, Status::Conflict),
        (Some(false), Status::Ok),
    ] {
        let findings = run_on(&k, &ik, &unreachable(), on_nodefs);
        let f = find(&findings, "eviction-hard-nodefs");
        assert_eq!(f.status, want, "{on_nodefs:?}: {f:?}");
        let f = find(&findings, "eviction-hard-nodefs-inodes");
        if on_nodefs == Some(false) {
            assert_eq!(f.status, Status::Ok, "{f:?}");
            assert!(f.message.contains("not on the node's filesystem"), "{f:?}");
        } else {
            assert_eq!(f.status, Status::NotChecked, "{f:?}");
        }
    }
}

/// Issue 28: the image filesystem is reported dedicated or on nodefs, split when
/// ImageFsInfo names container filesystems.
#[test]
fn a_split_or_dedicated_image_filesystem_is_reported() {
    let mut fs = ImageFsStats::new("/var/lib/images", 0, 100, 50);
    fs.container_filesystems = vec!["/var/lib/containers/storage".to_owned()];
    let reached = RuntimeView::Reached {
        images: vec![],
        image_fs: Ok(fs),
    };
    let k = kubelet("");
    let ik = ours(FlagValues::default());
    let findings = run_on(&k, &ik, &reached, Some(false));
    let f = find(&findings, "image-filesystem");
    assert_eq!(f.status, Status::Ok, "{f:?}");
    assert!(f.message.contains("/var/lib/images is dedicated"), "{f:?}");
    assert!(
        f.message.contains(
            "split (KEP-4191): the containers' writable layers are on /var/lib/containers/storage"
        ),
        "{f:?}"
    );
    let findings = run_on(&k, &ik, &reached, Some(true));
    let f = find(&findings, "image-filesystem");
    assert!(
        f.message.contains("on the node's filesystem (nodefs)"),
        "{f:?}"
    );
    let findings = run_on(&k, &ik, &unreachable(), None);
    let f = find(&findings, "image-filesystem");
    assert_eq!(f.status, Status::NotChecked, "{f:?}");
}

/// Issue 28: with inode thresholds set, an inodesFree percentage is compared with
/// imageGCHighInodesThresholdPercent as the byte signals are with --image-gc-high-threshold.
#[test]
fn an_inode_signal_is_compared_with_the_high_inode_threshold() {
    // The kubelet's default imagefs.inodesFree 5% evicts at 95% of inodes used.
    let k = kubelet("");
    let inodes = |high, low| FlagValues {
        image_gc_high_inodes_threshold: Some(high),
        image_gc_low_inodes_threshold: Some(low),
        ..thresholds(80, 70)
    };
    let f = find(
        &run_on(&k, &ours(inodes(96, 80)), &unreachable(), Some(true)),
        "eviction-hard-imagefs-inodes",
    )
    .clone();
    assert_eq!(f.status, Status::Conflict, "{f:?}");
    assert!(
        f.fix.as_deref().unwrap_or_default().contains(
            "imageGCHighInodesThresholdPercent = 90 and imageGCLowInodesThresholdPercent = 80 \
                 (or --set imageGCHighInodesThresholdPercent=90 --set \
                 imageGCLowInodesThresholdPercent=80)"
        ),
        "{f:?}"
    );
    let f = find(
        &run_on(&k, &ours(inodes(85, 75)), &unreachable(), Some(true)),
        "eviction-hard-imagefs-inodes",
    )
    .clone();
    assert_eq!(f.status, Status::Ok, "{f:?}");
    assert!(
        f.message
            .contains("above imagekeeper's imageGCHighInodesThresholdPercent 85%"),
        "{f:?}"
    );
}

#[test]
fn doctor_lists_the_irreplaceable_images() {
    let k = kubelet("");
    let mut pause = image("sha256:pause", false);
    pause.repo_tags = vec!["registry.k8s.io/pause:3.6".to_owned()];
    pause.repo_digests = vec!["registry.k8s.io/pause@sha256:00".to_owned()];
    let mut pulled = image("sha256:web", false);
    pulled.repo_tags = vec!["docker.io/library/web:1".to_owned()];
    pulled.repo_digests = vec!["docker.io/library/web@sha256:11".to_owned()];
    let mut imported = image("sha256:airgap", false);
    imported.repo_tags = vec!["docker.io/example/airgap:1".to_owned()];
    imported.repo_digests = Vec::new();
    let rt = RuntimeView::Reached {
        images: vec![pause, pulled, imported],
        image_fs: Err("not asked".to_owned()),
    };
    let ik = ours(thresholds(80, 70));
    let findings = check(&DoctorInput {
        kubelet: &k,
        imagekeeper: &ik,
        pulls_with_credentials: false,
        runtime: &rt,
        stale_intents: None,
        kubelet_preloaded: None,
        images_on_nodefs: None,
        runtime_sandbox_image: Some("registry.k8s.io/pause:3.6"),
        now: UnixNanos::from_secs(1_800_000_000),
        runtime_pins: None,
        cluster_signals: None,
    });
    let f = find(&findings, "irreplaceable-images");
    assert_eq!(f.status, Status::Ok);
    assert!(
        f.message
            .contains("registry.k8s.io/pause:3.6 (the runtime's sandbox image)")
            && f.message
                .contains("docker.io/example/airgap:1 (no repo digest)")
            && !f.message.contains("web"),
        "{f:?}"
    );
    assert_eq!(
        find(&run(&k, &ik, &unreachable(), false), "irreplaceable-images").status,
        Status::NotChecked
    );
}

/// The warm set against the room under the low threshold (1000 bytes, 300 used, low 80 %:
/// 500 of room): the first entry (300) fits, the second (500) does not beside it and is a
/// conflict naming it; an entry of unknown size is left to the warm cycle.
#[test]
fn warm_entries_that_do_not_fit_under_the_low_threshold_are_a_conflict() {
    let k = kubelet("");
    let spec = |image: &str, size: Option<u64>| crate::warm::WarmEntrySpec {
        image: image.into(),
        size: size.map(crate::warm::SizeSpec::Bytes),
        ..crate::warm::WarmEntrySpec::default()
    };
    let with_warm = |specs: &[crate::warm::WarmEntrySpec]| {
        let mut ik = ours(thresholds(90, 80));
        ik.gc.warm = crate::warm::WarmSet::new(
            crate::warm::resolve_specs(specs, |i| format!("warm[{i}]")).expect("specs"),
        );
        ik
    };
    let runtime = RuntimeView::Reached {
        images: vec![],
        image_fs: Ok(ImageFsStats::new("/var/lib/containerd", 300, 1000, 700)),
    };
    let ik = with_warm(&[
        spec("a:1", Some(300)),
        spec("b:1", Some(500)),
        spec("c:1", None),
    ]);
    let f = run(&k, &ik, &runtime, false);
    let warm = find(&f, "warm-set");
    assert_eq!(warm.status, Status::Conflict, "{warm:#?}");
    assert!(
        warm.message.contains("1 do not fit") && warm.message.contains("b:1 ("),
        "{}",
        warm.message
    );
    assert!(!warm.message.contains("a:1 ("), "{}", warm.message);
    assert!(warm.fix.is_some());

    let ik = with_warm(&[spec("a:1", Some(300)), spec("c:1", None)]);
    let f = run(&k, &ik, &runtime, false);
    assert_eq!(find(&f, "warm-set").status, Status::Ok, "{f:#?}");
    // No runtime: not judged.
    let f = run(
        &k,
        &with_warm(&[spec("b:1", Some(5000))]),
        &unreachable(),
        false,
    );
    assert_eq!(find(&f, "warm-set").status, Status::NotChecked);
    // No warm set: nothing to judge.
    let f = run(&k, &ours(thresholds(90, 80)), &runtime, false);
    assert_eq!(find(&f, "warm-set").status, Status::Ok);
}

#[test]
fn runtime_pins_off_is_reported_and_with_them_on_every_keep_must_be_listed_pinned() {
    use crate::cri::RuntimeVersion;
    use crate::model::{ImagePin, PinKey};
    let version = |name: &str, v: &str| RuntimeVersion {
        runtime_name: name.to_owned(),
        runtime_version: v.to_owned(),
        ..RuntimeVersion::default()
    };
    // An image pulled from a registry (a repo digest: not irreplaceable).
    let pulled = |id: &str, pinned: bool| RuntimeImage {
        repo_digests: vec![format!("{id}@sha256:{}", "ab".repeat(32))],
        ..image(id, pinned)
    };
    let pin = |name: &str| {
        (
            PinKey::new(name.to_owned(), String::new()),
            ImagePin {
                created_at: UnixNanos(1),
                until: UnixNanos::NEVER,
                reason: String::new(),
            },
        )
    };
    let k = kubelet("");
    let auto = ours(FlagValues::default());
    let off = ours(FlagValues {
        runtime_pins: Some("off".to_owned()),
        ..FlagValues::default()
    });
    // (what, config, version, images, pins, want status, want in message)
    type Case<'a> = (
        &'a str,
        &'a AgentConfig,
        RuntimeVersion,
        Vec<RuntimeImage>,
        Vec<(PinKey, ImagePin)>,
        Status,
        &'a str,
    );
    let cases: Vec<Case<'_>> = vec![
        (
            "off by setting",
            &off,
            version("containerd", "2.1.9"),
            vec![],
            vec![],
            Status::NotChecked,
            "(runtimePins = off): the kubelet's image GC and eviction manager cannot see",
        ),
        (
            "auto on containerd 1.6",
            &auto,
            version("containerd", "1.6.20"),
            vec![],
            vec![],
            Status::NotChecked,
            "containerd 1.6.20 does not carry a label added to an image already present into CRI ListImages' pinned flag (1.7.10 and later do: containerd issue 9328): the kubelet's image GC",
        ),
        (
            "auto on another runtime",
            &auto,
            version("cri-o", "1.31.0"),
            vec![],
            vec![],
            Status::NotChecked,
            "not containerd",
        ),
        (
            "every keep carried",
            &auto,
            version("containerd", "2.1.9"),
            vec![pulled("app", true), pulled("other", false)],
            vec![pin("app:1")],
            Status::Ok,
            "lists all 1 image(s) imagekeeper keeps as pinned",
        ),
        (
            "a pinned image not carried",
            &auto,
            version("containerd", "1.7.24"),
            vec![pulled("app", false), pulled("other", false)],
            vec![pin("app:1")],
            Status::Conflict,
            "does not list 1 of the 1 image(s) imagekeeper keeps as pinned, so the kubelet may remove them: app:1",
        ),
        (
            "a pinned image labelled, but listed pinned: false",
            &auto,
            version("containerd", "1.7.24"),
            vec![pulled("app", false), pulled("other", false)],
            vec![pin("app:1")],
            Status::Conflict,
            "app:1; 1 of them carry containerd's io.cri-containerd.pinned=pinned label, which the CRI does not list (containerd before 1.7.10 does not carry a label added to an image already present: containerd issue 9328): app:1",
        ),
        (
            "an irreplaceable image not carried",
            &auto,
            version("containerd", "2.1.9"),
            vec![image("sideloaded", false), pulled("other", false)],
            vec![],
            Status::Conflict,
            "sideloaded:1",
        ),
    ];
    for (what, ik, version, images, pins, want, text) in cases {
        // containerd's names labelled pinned: `app:1` in the case that says so.
        let labelled: &[&str] = match what.contains("labelled") {
            true => &["app:1"],
            false => &[],
        };
        let runtime = RuntimeView::Reached {
            images,
            image_fs: Err("not asked".to_owned()),
        };
        let view = RuntimePinsView {
            version: Ok(version),
            pins: Ok(pins),
            labelled: Ok(labelled.iter().map(|n| (*n).to_owned()).collect()),
            owners: Ok(vec![]),
            instance: None,
            record: None,
        };
        let findings = check(&DoctorInput {
            kubelet: &k,
            imagekeeper: ik,
            pulls_with_credentials: false,
            runtime: &runtime,
            stale_intents: Some(&[]),
            kubelet_preloaded: None,
            images_on_nodefs: None,
            runtime_sandbox_image: None,
            now: UnixNanos::from_secs(1_800_000_000),
            runtime_pins: Some(&view),
            cluster_signals: None,
        });
        let f = find(&findings, "runtime-pins");
        assert_eq!(f.status, want, "{what}: {f:#?}");
        assert!(f.message.contains(text), "{what}: {}", f.message);
        assert_eq!(f.fix.is_some(), want == Status::Conflict, "{what}");
    }
}

/// Issue 53: whose runtime pin labels containerd holds. Another instance's labels beside this
/// database's are a conflict naming that instance and how to remove its labels; this
/// instance's alone (or unnamed ones, from before instances) are fine; unread labels are
/// not checked.
#[test]
fn another_instances_runtime_pin_labels_are_a_conflict_that_names_it() {
    let me = "00000000000000aa";
    let other = "00000000000000bb";
    let owned = |pairs: &[(&str, Option<&str>)]| -> Result<Vec<(String, Option<String>)>, String> {
        Ok(pairs
            .iter()
            .map(|(n, o)| ((*n).to_owned(), o.map(str::to_owned)))
            .collect())
    };
    let cases = [
        (
            "this instance's labels alone",
            owned(&[("r/a:1", Some(me)), ("r/b:1", None)]),
            Some(me),
            Status::Ok,
            "2 name(s) (unnamed (written before instances): 1, instance 00000000000000aa: 1); this agent's instance: 00000000000000aa",
        ),
        (
            "another instance's labels beside this one's",
            owned(&[
                ("r/a:1", Some(me)),
                ("r/b:1", Some(other)),
                ("r/c:1", Some(other)),
            ]),
            Some(me),
            Status::Conflict,
            "instance 00000000000000bb on 2 name(s) (r/b:1, r/c:1)",
        ),
        (
            "no database read: every instance is listed, none judged",
            owned(&[("r/b:1", Some(other))]),
            None,
            Status::Ok,
            "instance 00000000000000bb: 1",
        ),
        (
            "containerd's labels not read",
            Err("connection refused".to_owned()),
            Some(me),
            Status::NotChecked,
            "connection refused",
        ),
    ];
    for (what, owners, instance, want, text) in cases {
        let view = RuntimePinsView {
            version: Err("not asked".to_owned()),
            pins: Ok(vec![]),
            labelled: Ok(vec![]),
            owners,
            instance: instance.map(str::to_owned),
            record: None,
        };
        let f = check_runtime_pin_instances(&view);
        assert_eq!(f.check, "runtime-pin-instances");
        assert_eq!(f.status, want, "{what}: {f:#?}");
        assert!(f.message.contains(text), "{what}: {}", f.message);
        if want == Status::Conflict {
            let fix = f.fix.as_deref().unwrap_or_default();
            assert!(fix.contains("remove-runtime-pins --instance ID"), "{fix}");
        }
    }
}

/// Issue 38: the doctor's findings and fixes name a deprecated flag's config key (and
/// `--set KEY=VALUE`), never the flag itself, across the checks that name a setting: pins,
/// container events, inode thresholds (off, conflicting, fine), irreplaceable images (kept and
/// not), the warm set, the pull intents and the runtime pins.
#[test]
fn no_finding_or_fix_names_a_deprecated_flag() {
    let deprecated: Vec<&str> = crate::config::CONFIG_FIELDS
        .iter()
        .filter(|f| f.flag_status == Some(crate::config::FlagStatus::Deprecated))
        .filter_map(|f| f.flag_name)
        .collect();
    assert!(deprecated.contains(&"--pinned-image"), "{deprecated:?}");
    let evented = kubelet("featureGates:\n  EventedPLEG: true\n");
    let images = RuntimeView::Reached {
        images: vec![image("sha256:a", false), image("sha256:b", false)],
        image_fs: Err("not asked".to_owned()),
    };
    let inodes = |high, low| FlagValues {
        image_gc_high_inodes_threshold: Some(high),
        image_gc_low_inodes_threshold: Some(low),
        ..thresholds(80, 70)
    };
    let mut findings = Vec::new();
    for flags in [
        thresholds(80, 70),
        inodes(96, 80),
        inodes(85, 75),
        FlagValues {
            protect_irreplaceable: Some(false),
            runtime_pins: Some("off".to_owned()),
            ..thresholds(80, 70)
        },
        FlagValues {
            pinned_images: vec!["registry.k8s.io/pause:*".to_owned()],
            ..thresholds(80, 70)
        },
    ] {
        findings.extend(run_on(&evented, &ours(flags.clone()), &images, Some(true)));
        findings.extend(run(&kubelet(""), &ours(flags), &images, false));
    }
    let conflicts: Vec<&str> = findings
        .iter()
        .filter(|f| f.status == Status::Conflict)
        .map(|f| f.check.as_str())
        .collect();
    for check in [
        "pinned-images",
        "container-events",
        "eviction-hard-imagefs-inodes",
    ] {
        assert!(conflicts.contains(&check), "{check}: {conflicts:?}");
    }
    for f in &findings {
        for text in std::iter::once(&f.message).chain(f.fix.as_ref()) {
            for flag in &deprecated {
                assert!(
                    !text.contains(flag),
                    "{}: {text:?} names the deprecated {flag}",
                    f.check
                );
            }
        }
    }
}

/// A kubelet configuration the kubelet itself refuses is refused with its
/// `ValidateKubeletConfiguration` texts (pkg/kubelet/apis/config/validation/validation.go),
/// every image GC rule it breaks aggregated as `utilerrors.NewAggregate` prints them,
/// including a negative `imageMinimumGCAge` (refused since 1.36) and `imageMaximumGCAge`.
#[test]
fn an_invalid_kubelet_config_is_refused_with_the_kubelets_validation_texts_aggregated() {
    let refused = |body: &str| match KubeletConfig::parse(&format!("{HEADER}{body}"), "/k.yaml") {
        Err(crate::doctor::KubeletConfigError::Invalid { field, message, .. }) => (field, message),
        other => panic!("{body}: refused as invalid, got {other:?}"),
    };
    let cases = [
        (
            "imageGCHighThresholdPercent: 150\n",
            "imageGCHighThresholdPercent",
            "invalid configuration: imageGCHighThresholdPercent (--image-gc-high-threshold) 150 must be between 0 and 100, inclusive",
        ),
        (
            "imageGCHighThresholdPercent: 80\nimageGCLowThresholdPercent: 80\n",
            "imageGCLowThresholdPercent and imageGCHighThresholdPercent",
            "invalid configuration: imageGCLowThresholdPercent (--image-gc-low-threshold) 80 must be less than imageGCHighThresholdPercent (--image-gc-high-threshold) 80",
        ),
        (
            "imageMinimumGCAge: -1m\n",
            "imageMinimumGCAge",
            "invalid configuration: imageMinimumGCAge -1m0s must not be negative",
        ),
        (
            "imageGCHighThresholdPercent: -1\nimageMinimumGCAge: -1m\nimageMaximumGCAge: -2h\n",
            "imageGCHighThresholdPercent",
            "[invalid configuration: imageGCHighThresholdPercent (--image-gc-high-threshold) -1 must be between 0 and 100, inclusive, \
             invalid configuration: imageGCLowThresholdPercent (--image-gc-low-threshold) 80 must be less than imageGCHighThresholdPercent (--image-gc-high-threshold) -1, \
             invalid configuration: imageMinimumGCAge -1m0s must not be negative, \
             invalid configuration: imageMaximumGCAge -2h0m0s must not be negative]",
        ),
        (
            "imageMaximumGCAge: 1m\n",
            "imageMaximumGCAge",
            "invalid configuration: imageMaximumGCAge 1m0s must be greater than imageMinimumGCAge 2m0s",
        ),
    ];
    for (body, want_field, want) in cases {
        let (field, message) = refused(body);
        assert_eq!(
            (field.as_str(), message.as_str()),
            (want_field, want),
            "{body}"
        );
    }
}

/// Issue 53: an absurd evictionHard (imagefs.available 99%: evicts at 1% used) was advised
/// "below 1%, for example --image-gc-high-threshold 1". No threshold fits below such a
/// line: the advice is to fix the kubelet's setting.
#[test]
fn an_absurd_eviction_threshold_is_advised_to_be_lowered_not_undercut() {
    for available in ["99%", "97%"] {
        let findings = run(
            &kubelet(&format!(
                "evictionHard:\n  imagefs.available: {available}\n"
            )),
            &ours(FlagValues::default()),
            &unreachable(),
            false,
        );
        let eviction = find(&findings, "eviction-hard-imagefs");
        assert_eq!(eviction.status, Status::Conflict, "{eviction:?}");
        let fix = eviction.fix.as_deref().unwrap_or_default();
        assert!(
            !fix.contains("--image-gc-high-threshold (") && !fix.contains("below 0%"),
            "{fix}"
        );
        assert!(
            fix.contains("lower the kubelet's evictionHard imagefs.available"),
            "{fix}"
        );
    }
    // A sane line keeps the threshold advice.
    let findings = run(
        &kubelet("evictionHard:\n  imagefs.available: 90%\n"),
        &ours(FlagValues::default()),
        &unreachable(),
        false,
    );
    let fix = find(&findings, "eviction-hard-imagefs")
        .fix
        .clone()
        .unwrap_or_default();
    assert!(
        fix.contains("--image-gc-high-threshold 5 --image-gc-low-threshold 0"),
        "{fix}"
    );
}

/// The kubelet's observed preloaded records: listed (at most ten, then a count), with the
/// damaged files skipped, never a conflict.
#[test]
fn observed_preloaded_records_are_listed_never_a_conflict() {
    use crate::kubelet::{PreloadedRecord, RecordError, Scan};
    let (k, ik, rt) = (kubelet(""), ours(FlagValues::default()), unreachable());
    let with = |preloaded: Option<&Scan<PreloadedRecord>>| {
        check(&DoctorInput {
            kubelet: &k,
            imagekeeper: &ik,
            pulls_with_credentials: false,
            runtime: &rt,
            stale_intents: None,
            kubelet_preloaded: preloaded,
            images_on_nodefs: None,
            runtime_sandbox_image: None,
            now: UnixNanos::from_secs(1_800_000_000),
            runtime_pins: None,
            cluster_signals: None,
        })
    };
    let record = |n: usize, names: &[&str]| PreloadedRecord {
        image_ref: format!("sha256:{n:02}"),
        observed_images: names.iter().map(|s| (*s).to_owned()).collect(),
    };
    let cases: Vec<(Scan<PreloadedRecord>, Vec<&str>)> = vec![
        (
            Scan::default(),
            vec!["the kubelet has no observed preloaded record"],
        ),
        (
            Scan {
                found: vec![record(1, &["registry.example/app", "app"]), record(2, &[])],
                ..Scan::default()
            },
            vec![
                "the kubelet observed 2 image(s) preloaded",
                "sha256:01 as \"registry.example/app\", \"app\"; sha256:02",
            ],
        ),
        (
            Scan {
                found: (0..12).map(|n| record(n, &["x"])).collect(),
                skipped: vec![(
                    "/var/lib/kubelet/image_manager/observed-preloaded/sha256-00".into(),
                    RecordError::Empty("imageRef"),
                )],
                ..Scan::default()
            },
            vec![
                "the kubelet observed 12 image(s) preloaded",
                "sha256:09 as \"x\"; and 2 more",
                "1 observed preloaded record file(s) skipped: \
                 /var/lib/kubelet/image_manager/observed-preloaded/sha256-00: its imageRef is empty",
            ],
        ),
    ];
    for (scan, wants) in &cases {
        let findings = with(Some(scan));
        let f = find(&findings, "kubelet-preloaded-records");
        assert_eq!(f.status, Status::Ok, "{f:?}");
        assert!(f.fix.is_none(), "{f:?}");
        for want in wants {
            assert!(f.message.contains(want), "{want:?} in {f:?}");
        }
    }
    assert_eq!(
        find(&with(None), "kubelet-preloaded-records").status,
        Status::NotChecked
    );
}

/// Issue 53 (6): containerd's labels against the database's record of the names its agent
/// labelled. A recorded name stripped of `io.imagekeeper.pinned` with its pinned label left is
/// orphaned; a name carrying this instance's labels the record does not hold is foreign: both a
/// conflict naming them; before the agent's adoption, or with nothing amiss, `ok`.
#[test]
fn orphaned_and_foreign_runtime_pin_labels_are_a_conflict_that_names_them() {
    use super::runtime_pin_record::check_runtime_pin_record;
    let me = "00000000000000aa";
    let view = |adopted: bool, record: &[&str]| RuntimePinsView {
        version: Err("not asked".to_owned()),
        pins: Ok(vec![]),
        labelled: Ok(vec![
            "r/orphan:1".to_owned(),
            "r/mine:1".to_owned(),
            "r/pause:1".to_owned(),
        ]),
        owners: Ok(vec![
            ("r/mine:1".to_owned(), Some(me.to_owned())),
            ("r/pause:1".to_owned(), Some(me.to_owned())),
        ]),
        instance: Some(me.to_owned()),
        record: Some(RecordView {
            names: record.iter().map(|n| (*n).to_owned()).collect(),
            adopted,
        }),
    };
    let f = check_runtime_pin_record(&view(true, &["r/orphan:1", "r/mine:1"]));
    assert_eq!(f.check, "runtime-pin-record");
    assert_eq!(f.status, Status::Conflict, "{f:#?}");
    assert!(
        f.message.contains("1 orphaned") && f.message.contains("r/orphan:1"),
        "{}",
        f.message
    );
    assert!(
        f.message.contains("1 foreign") && f.message.contains("r/pause:1"),
        "{}",
        f.message
    );
    let clean = check_runtime_pin_record(&view(true, &["r/mine:1", "r/pause:1"]));
    assert_eq!(clean.status, Status::Ok, "{clean:#?}");
    let before = check_runtime_pin_record(&view(false, &[]));
    assert_eq!(before.status, Status::Ok, "{before:#?}");
    assert!(before.message.contains("not adopted"), "{}", before.message);
}
