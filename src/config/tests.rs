//! Tests across the settings: the field list, precedence, every bad value's origin, the
//! file's parse errors.

use std::path::Path;

use super::*;
use crate::cri::DEFAULT_RUNTIME_ENDPOINT;
use crate::gc::GcPolicy;

/// The documented fields are the file's fields: the key list serde gives for an unknown
/// field is exactly [`CONFIG_FIELDS`]' keys, in order, and every default renders.
#[test]
fn config_fields_list_every_file_field_and_their_defaults() {
    let err = toml::from_str::<FileConfig>("notAField = 1")
        .expect_err("an unknown field is refused")
        .to_string();
    let expected = err
        .split_once("expected one of ")
        .map(|(_, rest)| rest.lines().next().unwrap_or_default().to_owned())
        .unwrap_or_else(|| panic!("serde names the fields: {err}"));
    let fields: Vec<&str> = expected
        .split(", ")
        .map(|f| f.trim().trim_matches('`'))
        .collect();
    let documented: Vec<&str> = CONFIG_FIELDS.iter().map(|f| f.key).collect();
    assert_eq!(
        fields, documented,
        "FileConfig's fields and CONFIG_FIELDS differ: add the field to CONFIG_FIELDS and run scripts/docs"
    );
    let defaults = AgentConfig::defaults().expect("the defaults are valid");
    for field in CONFIG_FIELDS {
        assert!(!(field.default)(&defaults).is_empty(), "{}", field.key);
        // A field with no flag (the warm set's tables) says "(none)".
        assert!(
            field.flag.starts_with("--") || field.flag == "(none)",
            "{}",
            field.key
        );
    }
}

pub(super) fn resolve(file: &FileConfig, flags: &FlagValues) -> Result<AgentConfig, ConfigError> {
    AgentConfig::resolve(file, Some(Path::new("/etc/ik.toml")), flags)
}

/// What follows "config file PATH: ", checked to hold no second copy of the path.
pub(super) fn err_tail(err: &str, path: &Path) -> String {
    let head = format!("config file {}: ", path.display());
    let tail = err.strip_prefix(&head).unwrap_or(err).to_owned();
    assert!(!tail.contains(&path.display().to_string()), "{err}");
    tail
}

#[test]
fn defaults_are_kubelets() {
    let c = resolve(&FileConfig::default(), &FlagValues::default()).expect("defaults are valid");
    assert_eq!(c.gc.policy, GcPolicy::default());
    assert_eq!(c.pull, PullConfig::default());
    assert_eq!(c.db, PathBuf::from(DEFAULT_DB));
    assert_eq!(c.cri.runtime_endpoint, DEFAULT_RUNTIME_ENDPOINT);
    assert_eq!(c.gc_period, Duration::from_secs(300));
    assert_eq!(c.image_cache_period, Duration::from_secs(30));
    assert!(c.metrics_address.is_none(), "metrics are off by default");
}

#[test]
fn flags_win_over_the_file() {
    let file: FileConfig = toml::from_str(
        "imageGCHighThresholdPercent = 90\nimageGCLowThresholdPercent = 70\nimageMinimumGCAge = \"5m\"\nregistryPullQPS = 2.5\npinnedImages = [\"a:1\"]\n",
    )
    .expect("toml");
    let flags = FlagValues {
        image_gc_high_threshold: Some(95),
        ..FlagValues::default()
    };
    let c = resolve(&file, &flags).expect("valid");
    assert_eq!(c.gc.policy.high_threshold_percent, 95);
    assert_eq!(c.gc.policy.low_threshold_percent, 70);
    assert_eq!(c.gc.policy.min_age, Duration::from_secs(300));
    assert_eq!(c.pull.registry_pull_qps, 2.5);
    assert_eq!(c.gc.pins.patterns(), ["a:1"]);
}

#[test]
fn every_bad_value_names_its_flag_or_field() {
    let cases: Vec<(FileConfig, FlagValues, &str)> = vec![
        (
            FileConfig::default(),
            FlagValues {
                image_gc_high_threshold: Some(101),
                ..FlagValues::default()
            },
            "--image-gc-high-threshold: invalid configuration: imageGCHighThresholdPercent (--image-gc-high-threshold) 101 must be between 0 and 100, inclusive",
        ),
        (
            FileConfig {
                image_gc_low_threshold_percent: Some(-1),
                ..FileConfig::default()
            },
            FlagValues::default(),
            "imageGCLowThresholdPercent in /etc/ik.toml: invalid configuration: imageGCLowThresholdPercent (--image-gc-low-threshold) -1 must be between 0 and 100, inclusive",
        ),
        (
            FileConfig {
                image_gc_low_threshold_percent: Some(90),
                ..FileConfig::default()
            },
            FlagValues::default(),
            "imageGCLowThresholdPercent in /etc/ik.toml and --image-gc-high-threshold (default): invalid configuration: imageGCLowThresholdPercent (--image-gc-low-threshold) 90 must be less than imageGCHighThresholdPercent (--image-gc-high-threshold) 85",
        ),
        (
            FileConfig::default(),
            FlagValues {
                minimum_image_ttl_duration: Some("2 minutes".into()),
                ..FlagValues::default()
            },
            "--minimum-image-ttl-duration: ",
        ),
        (
            FileConfig::default(),
            FlagValues {
                image_maximum_gc_age: Some("1m".into()),
                ..FlagValues::default()
            },
            "--image-maximum-gc-age and --minimum-image-ttl-duration (default): invalid configuration: imageMaximumGCAge 1m0s must be greater than imageMinimumGCAge 2m0s",
        ),
        (
            FileConfig::default(),
            FlagValues {
                registry_qps: Some(-1.0),
                ..FlagValues::default()
            },
            "--registry-qps: registryPullQPS -1 must not be a negative number",
        ),
        (
            FileConfig {
                registry_burst: Some(-3),
                ..FileConfig::default()
            },
            FlagValues::default(),
            "registryBurst in /etc/ik.toml: registryBurst -3 must not be a negative number",
        ),
        (
            FileConfig::default(),
            FlagValues {
                max_parallel_image_pulls: Some(5),
                ..FlagValues::default()
            },
            "--max-parallel-image-pulls: invalid configuration: maxParallelImagePulls cannot be larger than 1 unless SerializeImagePulls (--serialize-image-pulls) is set to false",
        ),
        (
            FileConfig::default(),
            FlagValues {
                container_runtime_endpoint: Some("tcp://1.2.3.4:5".into()),
                ..FlagValues::default()
            },
            "--container-runtime-endpoint: \"tcp://1.2.3.4:5\" is not unix:///path/to/socket",
        ),
        (
            FileConfig::default(),
            FlagValues {
                metrics_address: Some("localhost".into()),
                ..FlagValues::default()
            },
            "--metrics-address: \"localhost\" is not HOST:PORT",
        ),
        (
            FileConfig::default(),
            FlagValues {
                gc_period: Some("0s".into()),
                ..FlagValues::default()
            },
            "--gc-period: must be at least 1s",
        ),
        (
            FileConfig::default(),
            FlagValues {
                detect_period: Some("999ms".into()),
                ..FlagValues::default()
            },
            "--detect-period: must be at least 1s (got \"999ms\")",
        ),
        (
            FileConfig::default(),
            FlagValues {
                image_cache_period: Some("1ns".into()),
                ..FlagValues::default()
            },
            "--image-cache-period: must be at least 1s",
        ),
        (
            FileConfig {
                registry_burst: Some(i64::from(u32::MAX) + 1),
                ..FileConfig::default()
            },
            FlagValues::default(),
            "registryBurst in /etc/ik.toml: registryBurst 4294967296 is too large (at most 4294967295)",
        ),
        (
            FileConfig::default(),
            FlagValues {
                registry_qps: Some(f64::NAN),
                ..FlagValues::default()
            },
            "--registry-qps: registryPullQPS NaN must be a finite number",
        ),
        (
            FileConfig::default(),
            FlagValues {
                admin_socket: Some(PathBuf::from(format!("/run/{}.sock", "s".repeat(100)))),
                ..FlagValues::default()
            },
            "--admin-socket: /run/sss",
        ),
        (
            FileConfig::default(),
            FlagValues {
                db: Some("/var/lib/ik/records.redb".into()),
                admin_socket: Some("/var/lib/ik/records.redb".into()),
                ..FlagValues::default()
            },
            "--admin-socket: /var/lib/ik/records.redb is the database (--db)",
        ),
        (
            FileConfig::default(),
            FlagValues {
                admin_socket: Some("/run/containerd/containerd.sock".into()),
                ..FlagValues::default()
            },
            "--admin-socket: /run/containerd/containerd.sock is the runtime's socket (--container-runtime-endpoint)",
        ),
        (
            FileConfig::default(),
            FlagValues {
                image_service_endpoint: Some("unix:///run/img.sock".into()),
                admin_socket: Some("/run/img.sock".into()),
                ..FlagValues::default()
            },
            "--admin-socket: /run/img.sock is the runtime's socket (--image-service-endpoint)",
        ),
        (
            FileConfig::default(),
            FlagValues {
                pinned_images: vec!["*".into()],
                ..FlagValues::default()
            },
            "--pinned-image: pattern \"*\" must name an image",
        ),
    ];
    for (file, flags, want) in cases {
        let err = resolve(&file, &flags).expect_err(want).to_string();
        assert!(err.starts_with(want), "got {err:?}, want prefix {want:?}");
    }
}

#[test]
fn one_line_keeps_the_position_and_message_of_a_toml_error() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("bad.toml");
    std::fs::write(
        &path,
        "imageGCLowThresholdPercent = 50\nimageGCHighThreshold = 3\n",
    )
    .expect("write");
    let err = FileConfig::load(&path).expect_err("unknown field");
    let line = err.one_line();
    assert!(!line.contains('\n'), "{line}");
    assert!(
        line.starts_with(&format!(
            "config file {}: TOML parse error at line 2, column 1: unknown field `imageGCHighThreshold`",
            path.display()
        )),
        "{line}"
    );
}

/// Each bad file is refused by `FileConfig::load` with an error naming the file and what
/// is wrong in it (the field, the type, the line).
#[test]
fn unknown_or_mistyped_file_fields_are_errors_naming_the_file_and_the_problem() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("imagekeeper.toml");
    for (text, says) in [
        (
            "imageGCHighThreshold = 3\n",
            "unknown field `imageGCHighThreshold`",
        ),
        ("registryBurst = \"ten\"\n", "registryBurst"),
        ("not toml at all [", "line 1"),
    ] {
        std::fs::write(&path, text).expect("write");
        match FileConfig::load(&path) {
            Err(e @ ConfigError::File { .. }) => {
                let message = e.to_string();
                assert!(
                    message.starts_with(&format!("config file {}: ", path.display())),
                    "{message}"
                );
                assert!(message.contains(says), "{text}: {message}");
            }
            other => panic!("{text}: {other:?}"),
        }
    }
}

/// Issue 38: `--set KEY=VALUE` reads VALUE as the file would (TOML), else as text, so a
/// script need not quote a string; a value of the wrong type or an unknown key is refused
/// naming the key, and a value the resolver refuses is named `--set KEY`.
#[test]
fn set_reads_a_value_as_the_file_would_else_as_text() {
    let set = |arg: &str| parse_set(arg).unwrap_or_else(|e| panic!("{arg}: {e}"));
    assert_eq!(
        set("imageGCHighThresholdPercent=90").image_gc_high_threshold_percent,
        Some(90)
    );
    assert_eq!(
        set("journalMaxAge=48h").journal_max_age.as_deref(),
        Some("48h")
    );
    assert_eq!(
        set("journalMaxAge=\"48h\"").journal_max_age.as_deref(),
        Some("48h")
    );
    // 0 reads as a number first; the duration field takes it as text.
    assert_eq!(
        set("imageMaximumGCAge=0").image_maximum_gc_age.as_deref(),
        Some("0")
    );
    assert_eq!(set("kubeletRootDir=").kubelet_root_dir.as_deref(), Some(""));
    assert_eq!(
        set("pinnedImages=[\"a:1\", \"b:*\"]").pinned_images,
        Some(vec!["a:1".to_owned(), "b:*".to_owned()])
    );
    for (arg, says) in [
        ("nope=1", "--set: unknown key \"nope\""),
        (
            "registryBurst=lots",
            "--set registryBurst: \"lots\": invalid type: string \"lots\"",
        ),
        ("noEquals", "--set: \"noEquals\" is not KEY=VALUE"),
    ] {
        let err = parse_set(arg).expect_err(arg).to_string();
        assert!(err.starts_with(says), "{arg}: {err}");
    }
    let flags = FlagValues {
        set: set("journalMaxEntries=0"),
        ..FlagValues::default()
    };
    let err = resolve(&FileConfig::default(), &flags).expect_err("refused");
    assert!(
        err.to_string()
            .starts_with("--set journalMaxEntries: must be between 1"),
        "{err}"
    );
}

/// `diskAccountingPeriod`: 10m by default, `0s` turns the accounting off, under a minute is
/// refused naming the field, and a duration that is not one is refused too.
#[test]
fn the_disk_accounting_period_defaults_to_ten_minutes_and_0s_turns_it_off() {
    let with = |v: &str| FileConfig {
        disk_accounting_period: Some(v.to_owned()),
        ..FileConfig::default()
    };
    let flags = FlagValues::default();
    let period = |file: &FileConfig| resolve(file, &flags).map(|c| c.disk_accounting_period);
    assert_eq!(
        period(&FileConfig::default()).expect("default"),
        Some(std::time::Duration::from_secs(600))
    );
    assert_eq!(period(&with("0s")).expect("off"), None);
    assert_eq!(
        period(&with("1h")).expect("an hour"),
        Some(std::time::Duration::from_secs(3600))
    );
    for bad in ["30s", "soon"] {
        let err = period(&with(bad)).expect_err(bad).to_string();
        assert!(
            err.contains("diskAccountingPeriod in /etc/ik.toml"),
            "{bad}: {err}"
        );
    }
}

/// `diskPruneOrphans`: off by default and with `off`; a duration is the minimum age; a value
/// that is neither, or one with the accounting off (nothing would run it), is refused naming
/// the field.
#[test]
fn the_agents_orphan_prune_is_off_by_default_and_needs_the_disk_accounting() {
    let with = |prune: &str, period: Option<&str>| FileConfig {
        disk_prune_orphans: Some(prune.to_owned()),
        disk_accounting_period: period.map(str::to_owned),
        ..FileConfig::default()
    };
    let flags = FlagValues::default();
    let prune = |file: &FileConfig| resolve(file, &flags).map(|c| c.disk_prune_orphans);
    assert_eq!(prune(&FileConfig::default()).expect("default"), None);
    assert_eq!(prune(&with("off", None)).expect("off"), None);
    assert_eq!(
        prune(&with("24h", None)).expect("a day"),
        Some(std::time::Duration::from_secs(86_400))
    );
    assert_eq!(
        prune(&with("0s", Some("1h"))).expect("any age"),
        Some(std::time::Duration::ZERO)
    );
    for (bad, period) in [("soon", None), ("1h", Some("0s"))] {
        let err = prune(&with(bad, period)).expect_err(bad).to_string();
        assert!(
            err.contains("diskPruneOrphans in /etc/ik.toml"),
            "{bad}: {err}"
        );
    }
}

/// `clusterSignalsCronJobLead`: 10m by default, `0s` turns the CronJob keep and prefetch off,
/// past 24h or not a duration is refused naming the field.
#[test]
fn the_cronjob_lead_defaults_to_ten_minutes_and_is_at_most_a_day() {
    let with = |v: &str| FileConfig {
        cluster_signals_cronjob_lead: Some(v.to_owned()),
        ..FileConfig::default()
    };
    let flags = FlagValues::default();
    let lead = |file: &FileConfig| resolve(file, &flags).map(|c| c.cluster_signals_cronjob_lead);
    let secs = std::time::Duration::from_secs;
    assert_eq!(lead(&FileConfig::default()).expect("default"), secs(600));
    assert_eq!(lead(&with("0s")).expect("off"), secs(0));
    assert_eq!(lead(&with("24h")).expect("a day"), secs(86_400));
    for bad in ["25h", "soon"] {
        let err = lead(&with(bad)).expect_err(bad).to_string();
        assert!(
            err.contains("clusterSignalsCronJobLead in /etc/ik.toml"),
            "{bad}: {err}"
        );
    }
}

/// `clusterSignalsKeepShare`: 50 % by default, 1 to 100; anything else is refused naming the
/// field and the range.
#[test]
fn the_keep_share_defaults_to_half_the_disk_and_is_a_percentage_from_1_to_100() {
    let with = |v: i64| FileConfig {
        cluster_signals_keep_share: Some(v),
        ..FileConfig::default()
    };
    let flags = FlagValues::default();
    let share = |file: &FileConfig| resolve(file, &flags).map(|c| c.cluster_signals_keep_share);
    assert_eq!(share(&FileConfig::default()).expect("default"), 50);
    assert_eq!(share(&with(1)).expect("1"), 1);
    assert_eq!(share(&with(100)).expect("no limit"), 100);
    for bad in [0, 101, -5, 1_000] {
        let err = share(&with(bad)).expect_err("refused").to_string();
        assert!(
            err.contains("clusterSignalsKeepShare in /etc/ik.toml")
                && err.contains(&format!("between 1 and 100 (got {bad})")),
            "{bad}: {err}"
        );
    }
}
