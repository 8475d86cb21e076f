//! Unit tests of the KubeletConfiguration reader: the kubelet's defaults, drop-in merging,
//! thresholds and quantities, and the errors for bad files.

use super::*;

const HEADER: &str = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";

fn parse(body: &str) -> Result<KubeletConfig, KubeletConfigError> {
    KubeletConfig::parse(&format!("{HEADER}{body}"), "/etc/kubelet.yaml")
}

#[test]
fn an_empty_configuration_takes_the_kubelets_defaults() {
    let c = parse("").expect("valid");
    assert_eq!(c.image_gc_high_threshold_percent, 85);
    assert_eq!(c.image_gc_low_threshold_percent, 80);
    assert_eq!(c.image_minimum_gc_age, Duration::from_secs(120));
    assert_eq!(c.image_maximum_gc_age, Duration::ZERO);
    assert_eq!(c.eviction_hard, default_eviction_hard());
    assert!(c.eviction_soft.is_empty());
    assert_eq!(
        c.credential_verification,
        CredentialVerification::NeverVerifyPreloadedImages
    );
    assert_eq!(c.container_runtime_endpoint, DEFAULT_RUNTIME_ENDPOINT);
    assert_eq!(c.image_service_endpoint, None);
}

#[test]
fn eviction_hard_replaces_the_defaults_unless_merged() {
    let c = parse("evictionHard:\n  memory.available: 200Mi\n").expect("valid");
    assert!(c.eviction_hard.is_empty(), "{:?}", c.eviction_hard);

    let c = parse("evictionHard:\n  imagefs.available: 10%\nmergeDefaultEvictionSettings: true\n")
        .expect("valid");
    assert_eq!(
        c.eviction_hard.get(SIGNAL_IMAGEFS_AVAILABLE),
        Some(&Threshold::Percent(10.0))
    );
    assert_eq!(
        c.eviction_hard.get(SIGNAL_NODEFS_AVAILABLE),
        Some(&Threshold::Percent(10.0)),
        "merged default"
    );

    let c = parse("evictionHard:\n  imagefs.available: 0%\nmergeDefaultEvictionSettings: true\n")
        .expect("valid");
    assert_eq!(
        c.eviction_hard.get(SIGNAL_IMAGEFS_AVAILABLE),
        None,
        "0% is off"
    );
}

#[test]
fn thresholds_are_percentages_or_quantities_as_the_kubelet_parses_them() {
    let cases: &[(&str, Result<Option<Threshold>, ()>)] = &[
        ("15%", Ok(Some(Threshold::Percent(15.0)))),
        ("7.5%", Ok(Some(Threshold::Percent(7.5)))),
        ("0%", Ok(None)),
        ("100%", Ok(None)),
        ("101%", Err(())),
        ("-1%", Err(())),
        ("abc%", Err(())),
        ("0", Err(())),
        ("-5Gi", Err(())),
        ("ten", Err(())),
        ("10Gb", Err(())),
        ("", Err(())),
        ("1.2.3", Err(())),
        ("1e99", Err(())),
    ];
    for (text, want) in cases {
        let got = parse_threshold(text).map_err(|_| ());
        assert_eq!(&got, want, "{text}");
    }
    for (text, bytes) in [
        ("10Gi", 10.0 * 1024f64.powi(3)),
        ("500M", 5e8),
        ("1.5Ki", 1536.0),
        ("2e3", 2000.0),
        ("1E6", 1e6),
        ("+100", 100.0),
    ] {
        assert_eq!(parse_quantity(text), Ok(bytes), "{text}");
    }
    let overflowing = format!("1{}", "0".repeat(400));
    assert_eq!(
        parse_quantity(&overflowing),
        Err(format!(
            "{overflowing:?} is not a quantity (for example 10Gi or 500M) or a percentage"
        )),
        "not finite"
    );
}

#[test]
fn values_the_kubelet_refuses_are_errors_naming_the_field() {
    let cases = [
        (
            "imageGCHighThresholdPercent: 101\n",
            "imageGCHighThresholdPercent",
        ),
        (
            "imageGCHighThresholdPercent: 80\nimageGCLowThresholdPercent: 80\n",
            "must be less than",
        ),
        ("imageMinimumGCAge: two minutes\n", "imageMinimumGCAge"),
        (
            "imageMaximumGCAge: 1m\n",
            "must be greater than imageMinimumGCAge",
        ),
        (
            "evictionHard:\n  imagefs.available: 150%\n",
            "evictionHard.imagefs.available",
        ),
        (
            "evictionSoft:\n  nodefs.available: lots\n",
            "evictionSoft.nodefs.available",
        ),
        (
            "imagePullCredentialsVerificationPolicy: Sometimes\n",
            "imagePullCredentialsVerificationPolicy",
        ),
        ("imageGCHighThresholdPercent: \"85\"\n", "not valid YAML"),
        ("evictionHard: [1, 2]\n", "not valid YAML"),
    ];
    for (body, want) in cases {
        let err = parse(body).expect_err(body).to_string();
        assert!(err.contains(want), "{body}: {err}");
    }
    for (text, want) in [
        ("", "is empty"),
        ("kind: KubeletConfiguration\n", "apiVersion: missing"),
        (
            "apiVersion: v1\nkind: Pod\n",
            "kind: \"Pod\" is not KubeletConfiguration",
        ),
        (
            "apiVersion: kubelet.config.k8s.io/v1alpha1\nkind: KubeletConfiguration\n",
            "is not kubelet.config.k8s.io/v1beta1",
        ),
        ("{ not yaml", "not valid YAML"),
    ] {
        let err = KubeletConfig::parse(text, "/k.yaml")
            .expect_err(text)
            .to_string();
        assert!(err.contains(want), "{text:?}: {err}");
    }
}

#[test]
fn the_inode_signals_default_to_5_percent_and_go_with_an_unmerged_eviction_hard() {
    let c = parse("").expect("valid");
    for signal in [SIGNAL_IMAGEFS_INODES_FREE, SIGNAL_NODEFS_INODES_FREE] {
        assert_eq!(
            c.eviction_hard.get(signal),
            Some(&Threshold::Percent(5.0)),
            "{signal}"
        );
    }
    let c = parse("evictionHard:\n  imagefs.available: 10%\n").expect("valid");
    assert_eq!(c.eviction_hard.get(SIGNAL_IMAGEFS_INODES_FREE), None);
    assert_eq!(c.eviction_hard.get(SIGNAL_NODEFS_INODES_FREE), None);
    let c = parse("evictionHard:\n  imagefs.inodesFree: 10%\nmergeDefaultEvictionSettings: true\n")
        .expect("valid");
    assert_eq!(
        c.eviction_hard.get(SIGNAL_IMAGEFS_INODES_FREE),
        Some(&Threshold::Percent(10.0))
    );
    assert_eq!(
        c.eviction_hard.get(SIGNAL_NODEFS_INODES_FREE),
        Some(&Threshold::Percent(5.0)),
        "merged default"
    );
    let err = parse("evictionSoft:\n  nodefs.inodesFree: many\n").expect_err("bad");
    assert!(
        err.to_string().contains("evictionSoft.nodefs.inodesFree"),
        "{err}"
    );
}

/// The kubelet's --config-dir: `*.conf` files, walked in lexical order (subdirectories
/// where their names sort), each merged over the file as a JSON merge patch.
#[test]
fn drop_ins_merge_over_the_file_in_lexical_order() {
    let dir = tempfile::tempdir().expect("tempdir");
    let base = dir.path().join("config.yaml");
    std::fs::write(
        &base,
        format!(
            "{HEADER}imageGCHighThresholdPercent: 70\nimageGCLowThresholdPercent: 60\n\
             featureGates:\n  KubeletEnsureSecretPulledImages: false\n"
        ),
    )
    .expect("write");
    let drop = dir.path().join("conf.d");
    std::fs::create_dir_all(drop.join("15-sub")).expect("mkdir");
    let write = |name: &str, body: &str| {
        std::fs::write(drop.join(name), format!("{HEADER}{body}")).expect("write")
    };
    write("20-high.conf", "imageGCHighThresholdPercent: 90\n");
    // Applied before 20-high.conf: its 95 is overridden.
    write(
        "10-high.conf",
        "imageGCHighThresholdPercent: 95\nimageGCLowThresholdPercent: 88\n",
    );
    // In a subdirectory sorted between them; a map merges key by key.
    write(
        "15-sub/a.conf",
        "featureGates:\n  EventedPLEG: true\nevictionHard:\n  imagefs.available: 5%\n",
    );
    // Not *.conf: not read (it would be invalid).
    std::fs::write(drop.join("30-notes.yaml"), "not: [a config").expect("write");
    let c = KubeletConfig::load(&base, Some(&drop)).expect("valid");
    assert_eq!(c.image_gc_high_threshold_percent, 90);
    assert_eq!(c.image_gc_low_threshold_percent, 88);
    assert!(c.evented_pleg);
    assert_eq!(
        c.credential_verification,
        CredentialVerification::GateOff,
        "the file's gate is kept beside the drop-in's"
    );
    assert_eq!(
        c.eviction_hard.get(SIGNAL_IMAGEFS_AVAILABLE),
        Some(&Threshold::Percent(5.0))
    );
    // The file set no evictionHard: the kubelet defaulted it before merging the drop-in,
    // so the signals the drop-in does not name keep their defaults.
    assert_eq!(
        c.eviction_hard.get(SIGNAL_NODEFS_AVAILABLE),
        Some(&Threshold::Percent(10.0))
    );
    assert_eq!(
        c.eviction_hard.get(SIGNAL_IMAGEFS_INODES_FREE),
        Some(&Threshold::Percent(5.0))
    );
    assert_eq!(
        c.drop_ins,
        vec![
            drop.join("10-high.conf"),
            drop.join("15-sub/a.conf"),
            drop.join("20-high.conf")
        ]
    );
    // Without the dir the file alone counts.
    let c = KubeletConfig::load(&base, None).expect("valid");
    assert_eq!(c.image_gc_high_threshold_percent, 70);
    // A bad drop-in is an error naming it.
    write("40-bad.conf", "imageGCHighThresholdPercent: 101\n");
    let err = KubeletConfig::load(&base, Some(&drop)).expect_err("invalid");
    assert!(
        err.to_string().contains("imageGCHighThresholdPercent"),
        "{err}"
    );
    std::fs::write(
        drop.join("40-bad.conf"),
        "imageGCHighThresholdPercent: 80\n",
    )
    .expect("write");
    let err = KubeletConfig::load(&base, Some(&drop)).expect_err("no kind");
    assert!(
        err.to_string().contains("40-bad.conf") && err.to_string().contains("kind"),
        "{err}"
    );
    // A FIFO is refused by the shared reader, not waited on.
    std::fs::remove_file(drop.join("40-bad.conf")).expect("rm");
    let fifo = drop.join("50-fifo.conf");
    let c_path = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).expect("path");
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
    let err = KubeletConfig::load(&base, Some(&drop)).expect_err("fifo");
    assert!(err.to_string().contains("not a regular file"), "{err}");
    // A missing dir is an error naming it.
    let err = KubeletConfig::load(&base, Some(&dir.path().join("nope"))).expect_err("missing");
    assert!(err.to_string().contains("nope"), "{err}");
}

proptest::proptest! {
    #[test]
    fn no_input_panics_the_reader(
        text in "\\PC{0,200}",
        value in "[-+0-9.eEkKMGTPi%mun ]{0,12}",
    ) {
        let _ = KubeletConfig::parse(&text, "/k.yaml");
        let _ = parse_threshold(&value);
        let body = format!(
            "evictionHard:\n  imagefs.available: {value:?}\nimageMaximumGCAge: {value:?}\n"
        );
        let _ = parse(&body);
    }
}

/// The kubelet's allowlist pattern rules (image_pull_policies.go,
/// getAllowlistImagePattern), each with its message; a config the kubelet refuses is
/// refused here, naming the field.
#[test]
fn allowlist_patterns_are_checked_as_the_kubelet_checks_them() {
    let cases: [(&str, Result<(), &str>); 11] = [
        ("docker.io/library/nginx", Ok(())),
        ("registry.k8s.io/*", Ok(())),
        ("registry.k8s.io/pause", Ok(())),
        ("registry.k8s.io/sub/*", Ok(())),
        (
            " docker.io/library/nginx",
            Err("leading/trailing spaces are not allowed:  docker.io/library/nginx"),
        ),
        ("", Err("the supplied pattern is too short: ")),
        ("/*", Err("at least registry hostname is required")),
        (
            "registry.k8s.io/pa*",
            Err(
                "not a valid wildcard pattern, only patterns ending with '/*' are allowed: registry.k8s.io/pa*",
            ),
        ),
        (
            "*",
            Err("not a valid wildcard pattern, only patterns ending with '/*' are allowed: *"),
        ),
        (
            "nginx",
            Err("neither tag nor digest is accepted in an image reference: nginx"),
        ),
        (
            "registry.k8s.io/pause:3.10",
            Err(
                "neither tag nor digest is accepted in an image reference: registry.k8s.io/pause:3.10",
            ),
        ),
    ];
    for (pattern, want) in cases {
        let got = allowlist_image_pattern(pattern);
        assert_eq!(
            got.as_ref().copied().map_err(String::as_str),
            want,
            "{pattern:?}"
        );
    }
    let bad = allowlist_image_pattern("Registry.example/UPPER").expect_err("not a name");
    assert!(
        bad.starts_with("failed to parse as an image name: "),
        "{bad}"
    );
    let err = parse(
        "imagePullCredentialsVerificationPolicy: NeverVerifyAllowlistedImages\npreloadedImagesVerificationAllowlist: [\"registry.k8s.io/*\", \"nginx:1\"]\n",
    )
    .expect_err("the kubelet refuses it");
    assert!(
        matches!(&err, KubeletConfigError::Invalid { field, message, .. }
            if field == "preloadedImagesVerificationAllowlist"
            && message == "neither tag nor digest is accepted in an image reference: nginx:1"),
        "{err}"
    );
    parse(
        "imagePullCredentialsVerificationPolicy: NeverVerifyAllowlistedImages\npreloadedImagesVerificationAllowlist: [\"registry.k8s.io/*\", \"docker.io/library/busybox\"]\n",
    )
    .expect("valid patterns");
}

#[test]
fn the_verification_policy_and_the_max_age_follow_their_gates() {
    let c = parse("featureGates:\n  KubeletEnsureSecretPulledImages: false\nimagePullCredentialsVerificationPolicy: AlwaysVerify\n")
        .expect("valid");
    assert_eq!(c.credential_verification, CredentialVerification::GateOff);
    let c = parse("imageMaximumGCAge: 24h\n").expect("valid");
    assert_eq!(c.image_maximum_gc_age, Duration::from_secs(86400));
    // GA and locked from 1.35: the kubelet refuses to start with the gate off.
    let err = parse("featureGates:\n  ImageMaximumGCAge: false\nimageMaximumGCAge: 24h\n")
        .expect_err("locked gate");
    assert!(
        matches!(&err, KubeletConfigError::Invalid { field, .. } if field == "featureGates.ImageMaximumGCAge"),
        "{err}"
    );
    assert!(
        err.to_string().contains(
            "cannot set feature gate ImageMaximumGCAge to false, feature is locked to true"
        ),
        "{err}"
    );
    let c =
        parse("featureGates:\n  ImageMaximumGCAge: true\nimageMaximumGCAge: 24h\n").expect("valid");
    assert_eq!(c.image_maximum_gc_age, Duration::from_secs(86400));
    assert!(!c.evented_pleg, "EventedPLEG is off by default");
    let c = parse("featureGates:\n  EventedPLEG: true\n").expect("valid");
    assert!(c.evented_pleg);
    let c = parse("imagePullCredentialsVerificationPolicy: AlwaysVerify\nsomeFieldImagekeeperDoesNotRead: 3\n")
        .expect("unknown fields are ignored");
    assert_eq!(
        c.credential_verification,
        CredentialVerification::AlwaysVerify
    );
}
