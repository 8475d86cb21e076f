//! Tests of the GC settings.

use std::time::Duration;

use crate::config::tests::resolve;
use crate::config::*;

use super::*;

/// The journal's retention: 30 days and 10,000 entries by default, the file's fields, the
/// flags over them, and a bad value refused naming where it came from.
#[test]
fn journal_retention_defaults_file_and_flags_and_bad_values_name_their_origin() {
    let file: FileConfig =
        toml::from_str("journalMaxAge = \"48h\"\njournalMaxEntries = 500\n").expect("toml");
    let c = resolve(&FileConfig::default(), &FlagValues::default()).expect("valid");
    assert_eq!(
        c.gc.journal_retention, None,
        "no flag nor field: the store's"
    );
    let c = resolve(&file, &FlagValues::default()).expect("valid");
    assert_eq!(
        c.gc.journal_retention,
        Some(JournalRetention {
            max_age: Duration::from_secs(48 * 3600),
            max_entries: 500,
        })
    );
    let flags = FlagValues {
        journal_max_entries: Some(20),
        ..FlagValues::default()
    };
    let c = resolve(&file, &flags).expect("valid");
    assert_eq!(
        c.gc.journal_retention,
        Some(JournalRetention {
            max_age: Duration::from_secs(48 * 3600),
            max_entries: 20,
        })
    );
    let flags = FlagValues {
        journal_max_entries: Some(20),
        ..FlagValues::default()
    };
    let c = resolve(&FileConfig::default(), &flags).expect("valid");
    assert_eq!(
        c.gc.journal_retention,
        Some(JournalRetention {
            max_age: JournalRetention::default().max_age,
            max_entries: 20,
        })
    );
    let bad = [
        (
            FlagValues {
                journal_max_entries: Some(0),
                ..FlagValues::default()
            },
            "--journal-max-entries: must be between 1 and",
        ),
        (
            FlagValues {
                journal_max_age: Some("0s".into()),
                ..FlagValues::default()
            },
            "--journal-max-age: must be at least 1s",
        ),
        (
            FlagValues {
                journal_max_age: Some("a week".into()),
                ..FlagValues::default()
            },
            "--journal-max-age",
        ),
    ];
    for (flags, want) in bad {
        let err = resolve(&FileConfig::default(), &flags).expect_err("refused");
        assert!(err.to_string().starts_with(want), "{err}");
    }
}

#[test]
fn kubelet_root_dir_defaults_to_the_kubelets_flag_wins_and_empty_disables() {
    let file: FileConfig = toml::from_str("kubeletRootDir = \"/srv/kubelet\"\n").expect("toml");
    let cases: [(&FileConfig, Option<&str>, Option<&str>); 4] = [
        (&FileConfig::default(), None, Some(DEFAULT_KUBELET_ROOT_DIR)),
        (&file, None, Some("/srv/kubelet")),
        (&file, Some("/data/kubelet"), Some("/data/kubelet")),
        (&file, Some(""), None),
    ];
    for (file, flag, want) in cases {
        let flags = FlagValues {
            kubelet_root_dir: flag.map(str::to_owned),
            ..FlagValues::default()
        };
        let c = resolve(file, &flags).expect("valid");
        assert_eq!(
            c.gc.kubelet_root_dir,
            want.map(PathBuf::from),
            "flag {flag:?}"
        );
    }
    let relative = FlagValues {
        kubelet_root_dir: Some("var/lib/kubelet".into()),
        ..FlagValues::default()
    };
    let err = resolve(&FileConfig::default(), &relative).expect_err("relative");
    assert_eq!(
        err.to_string(),
        "--kubelet-root-dir: \"var/lib/kubelet\" is not an absolute path"
    );
}

/// `imageGCPolicy`: kubelet-order by default, adaptive or
/// predictive when set,
/// the flag over the file, anything else refused naming where it came from.
#[test]
fn image_gc_policy_from_flags_or_file() {
    let c = resolve(&FileConfig::default(), &FlagValues::default()).expect("valid");
    assert_eq!(c.gc.order, GcOrder::KubeletOrder, "the default");
    let file: FileConfig = toml::from_str("imageGCPolicy = \"adaptive\"\n").expect("toml");
    let c = resolve(&file, &FlagValues::default()).expect("valid");
    assert_eq!(c.gc.order, GcOrder::Adaptive);
    let flags = FlagValues {
        image_gc_policy: Some("kubelet-order".into()),
        ..FlagValues::default()
    };
    let c = resolve(&file, &flags).expect("valid");
    assert_eq!(c.gc.order, GcOrder::KubeletOrder, "the flag wins");
    let file: FileConfig = toml::from_str("imageGCPolicy = \"predictive\"\n").expect("toml");
    let c = resolve(&file, &FlagValues::default()).expect("valid");
    assert_eq!(c.gc.order, GcOrder::Predictive);
    let flags = FlagValues {
        image_gc_policy: Some("lru".into()),
        ..FlagValues::default()
    };
    let err = resolve(&FileConfig::default(), &flags).expect_err("bad flag");
    assert!(
        err.to_string()
            .contains("--image-gc-policy: \"lru\" is none of kubelet-order, adaptive, predictive"),
        "{err}"
    );
    let file: FileConfig = toml::from_str("imageGCPolicy = \"gdsf\"\n").expect("toml");
    let err = resolve(&file, &FlagValues::default()).expect_err("bad field");
    assert!(
        err.to_string().contains("imageGCPolicy in /etc/ik.toml"),
        "{err}"
    );
}

#[test]
fn intent_max_age_and_container_events_from_flags_or_file() {
    let c = resolve(&FileConfig::default(), &FlagValues::default()).expect("valid");
    assert_eq!(c.gc.kubelet_intent_max_age, None, "the default");
    assert_eq!(c.container_events, ContainerEvents::Auto);
    let file: FileConfig =
        toml::from_str("kubeletIntentMaxAge = \"6h\"\ncontainerEvents = \"off\"\n").expect("toml");
    let c = resolve(&file, &FlagValues::default()).expect("valid");
    assert_eq!(
        c.gc.kubelet_intent_max_age,
        Some(Duration::from_secs(6 * 3600))
    );
    assert_eq!(c.container_events, ContainerEvents::Off);
    let flags = FlagValues {
        kubelet_intent_max_age: Some("2h".into()),
        container_events: Some("auto".into()),
        ..FlagValues::default()
    };
    let c = resolve(&file, &flags).expect("valid");
    assert_eq!(
        c.gc.kubelet_intent_max_age,
        Some(Duration::from_secs(2 * 3600))
    );
    assert_eq!(c.container_events, ContainerEvents::Auto);
    for (flags, want) in [
        (
            FlagValues {
                kubelet_intent_max_age: Some("30s".into()),
                ..FlagValues::default()
            },
            "--kubelet-intent-max-age: must be at least 1m0s",
        ),
        (
            FlagValues {
                kubelet_intent_max_age: Some("soon".into()),
                ..FlagValues::default()
            },
            "--kubelet-intent-max-age",
        ),
        (
            FlagValues {
                container_events: Some("on".into()),
                ..FlagValues::default()
            },
            "--container-events: \"on\" is neither auto nor off",
        ),
    ] {
        let err = resolve(&FileConfig::default(), &flags).expect_err(want);
        assert!(err.to_string().contains(want), "{err}");
    }
    let file: FileConfig = toml::from_str("containerEvents = \"maybe\"\n").expect("toml");
    let err = resolve(&file, &FlagValues::default()).expect_err("bad");
    assert!(
        err.to_string().contains("containerEvents in /etc/ik.toml"),
        "{err}"
    );
}

/// Issue 28: the inode thresholds and the byte budget, from flags or the file, off unless
/// both of a pair are given, refused like the byte thresholds with the origins named.
#[test]
fn inode_thresholds_and_byte_budgets_resolve_and_refuse_with_their_names() {
    let c = resolve(&FileConfig::default(), &FlagValues::default()).expect("defaults");
    assert_eq!((c.gc.policy.inodes, c.gc.policy.bytes), (None, None));
    let file: FileConfig = toml::from_str(
        "imageGCHighInodesThresholdPercent = 90\nimageGCLowInodesThresholdPercent = 70\nimageGCHighBytes = \"500Gi\"\nimageGCLowBytes = 1000\n",
    )
    .expect("toml");
    let c = resolve(&file, &FlagValues::default()).expect("valid");
    assert_eq!(
        c.gc.policy.inodes,
        Some(InodeThresholds { high: 90, low: 70 })
    );
    assert_eq!(
        c.gc.policy.bytes,
        Some(ByteBudget {
            high: 500 << 30,
            low: 1000
        })
    );
    let flags = FlagValues {
        image_gc_low_inodes_threshold: Some(80),
        image_gc_low_bytes: Some("400Gi".into()),
        ..FlagValues::default()
    };
    let c = resolve(&file, &flags).expect("flags win");
    assert_eq!(
        c.gc.policy.inodes,
        Some(InodeThresholds { high: 90, low: 80 })
    );
    assert_eq!(c.gc.policy.bytes.map(|b| b.low), Some(400 << 30));
    let cases = [
        (
            FlagValues {
                image_gc_high_inodes_threshold: Some(90),
                ..FlagValues::default()
            },
            "--image-gc-high-inodes-threshold: set without imageGCLowInodesThresholdPercent (give both, or neither to leave the rule off)",
        ),
        (
            FlagValues {
                image_gc_low_bytes: Some("1Gi".into()),
                ..FlagValues::default()
            },
            "--image-gc-low-bytes: set without imageGCHighBytes (give both, or neither to leave the rule off)",
        ),
        (
            FlagValues {
                image_gc_high_inodes_threshold: Some(101),
                image_gc_low_inodes_threshold: Some(50),
                ..FlagValues::default()
            },
            "--image-gc-high-inodes-threshold: invalid HighInodesThresholdPercent 101, must be in range [0-100]",
        ),
        (
            FlagValues {
                image_gc_high_inodes_threshold: Some(80),
                image_gc_low_inodes_threshold: Some(80),
                ..FlagValues::default()
            },
            "--image-gc-low-inodes-threshold and --image-gc-high-inodes-threshold: invalid configuration: imageGCLowInodesThresholdPercent 80 must be less than imageGCHighInodesThresholdPercent 80",
        ),
        (
            FlagValues {
                image_gc_high_bytes: Some("1Gi".into()),
                image_gc_low_bytes: Some("2Gi".into()),
                ..FlagValues::default()
            },
            "--image-gc-low-bytes and --image-gc-high-bytes: LowBytes 2147483648 can not be higher than HighBytes 1073741824",
        ),
        (
            FlagValues {
                image_gc_high_bytes: Some("lots".into()),
                image_gc_low_bytes: Some("2Gi".into()),
                ..FlagValues::default()
            },
            "--image-gc-high-bytes: \"lots\" is not a quantity (for example 10Gi or 500M)",
        ),
    ];
    for (flags, want) in cases {
        let err = resolve(&FileConfig::default(), &flags).expect_err(want);
        assert_eq!(err.to_string(), want);
    }
    // Issue 38: one of a pair from the file or `--set` names the missing one by its config
    // key, never by its deprecated flag.
    let half: FileConfig = toml::from_str("imageGCLowInodesThresholdPercent = 70\n").expect("toml");
    let err = resolve(&half, &FlagValues::default()).expect_err("half a pair");
    assert_eq!(
        err.to_string(),
        "imageGCLowInodesThresholdPercent in /etc/ik.toml: set without \
         imageGCHighInodesThresholdPercent (give both, or neither to leave the rule off)"
    );
    let set = FlagValues {
        set: toml::from_str("imageGCHighBytes = \"2Gi\"\n").expect("toml"),
        ..FlagValues::default()
    };
    let err = resolve(&FileConfig::default(), &set).expect_err("half a pair");
    assert_eq!(
        err.to_string(),
        "--set imageGCHighBytes: set without imageGCLowBytes (give both, or neither to leave \
         the rule off)"
    );
    let file: FileConfig =
        toml::from_str("imageGCHighBytes = \"-1\"\nimageGCLowBytes = 0\n").expect("toml");
    let err = resolve(&file, &FlagValues::default()).expect_err("negative");
    assert_eq!(
        err.to_string(),
        "imageGCHighBytes in /etc/ik.toml: \"-1\" is negative; a size in bytes is 0 or more"
    );
}
