//! Tests of the warm settings.

use std::path::Path;
use std::time::Duration;

use crate::config::tests::resolve;
use crate::config::*;

use super::*;

/// `[[warm]]` tables, `[warmFromHistory]` and the warm loop's fields from the file; the
/// flags win; every bad value names its field or flag.
#[test]
fn warm_settings_from_the_file_and_flags_and_bad_values_name_their_origin() {
    let path = Path::new("/etc/ik.toml");
    let parse = |text: &str| -> FileConfig { toml::from_str(text).expect("TOML") };
    let file = parse(
        "warmPeriod = \"30s\"\nwarmParallelPulls = 2\n\
         [[warm]]\nimage = \"vllm/vllm-openai:v0.6\"\nsize = \"20Gi\"\n\
         [[warm]]\nimage = \"busybox\"\nruntimeHandler = \"gpu\"\nfor = \"1h\"\n\
         [warmFromHistory]\nusedWithin = \"12h\"\nmaxBytes = 1000\n",
    );
    let c = AgentConfig::resolve(&file, Some(path), &FlagValues::default()).expect("valid");
    assert_eq!(c.warm.period, Duration::from_secs(30));
    assert_eq!(c.warm.parallel_pulls, 2);
    let from_history = c.warm.from_history.expect("set");
    assert_eq!(from_history.used_within, Duration::from_secs(12 * 3600));
    assert_eq!(from_history.max_bytes, Some(1000));
    let entries = c.gc.warm.entries();
    assert_eq!(entries.len(), 2);
    assert_eq!(entries[0].size_hint, Some(20 << 30));
    assert_eq!(entries[1].runtime_handler, "gpu");
    assert_eq!(entries[1].origin, "warm[1] in /etc/ik.toml");
    let defaults =
        AgentConfig::resolve(&FileConfig::default(), None, &FlagValues::default()).expect("valid");
    assert_eq!(defaults.warm.period, Duration::from_secs(60));
    assert_eq!(defaults.warm.parallel_pulls, 1);
    assert!(defaults.gc.warm.is_empty() && defaults.warm.from_history.is_none());
    let flags = FlagValues {
        warm_period: Some("5s".into()),
        ..FlagValues::default()
    };
    let c = AgentConfig::resolve(&file, Some(path), &flags).expect("valid");
    assert_eq!(c.warm.period, Duration::from_secs(5), "the flag wins");

    let err = |text: &str, flags: &FlagValues| {
        AgentConfig::resolve(&parse(text), Some(path), flags)
            .expect_err("invalid")
            .to_string()
    };
    let none = FlagValues::default();
    assert_eq!(
        err("warmPeriod = \"500ms\"", &none),
        "warmPeriod in /etc/ik.toml: must be at least 1s (got \"500ms\")"
    );
    assert_eq!(
        err(
            "",
            &FlagValues {
                warm_period: Some("0s".into()),
                ..FlagValues::default()
            }
        ),
        "--warm-period: must be at least 1s (got \"0s\")"
    );
    assert_eq!(
        err("warmParallelPulls = 65", &none),
        "warmParallelPulls in /etc/ik.toml: must be between 1 and 64 (got 65)"
    );
    assert!(
        err("[warmFromHistory]\nmaxBytes = \"lots\"", &none)
            .starts_with("warmFromHistory.maxBytes in /etc/ik.toml: \"lots\" is not a quantity")
    );
    assert!(
        err("[[warm]]\nimage = \"\"", &none)
            .starts_with("warm[0] in /etc/ik.toml: image: must not be empty")
    );
    assert!(
        err(
            "",
            &FlagValues {
                warm_set_dir: Some("/nonexistent/warm".into()),
                ..FlagValues::default()
            }
        )
        .starts_with(
            "--warm-set-dir: warm set directory /nonexistent/warm: cannot read it: No such file"
        )
    );
}

/// Issue 41: a warm set holds at most MAX_WARM_ENTRIES entries (the file's tables and
/// the directory's files together) from at most MAX_WARM_FILES files; more is refused
/// naming the count, under the flag that gave the directory. Exactly the cap is accepted.
#[test]
fn a_warm_set_over_its_caps_is_refused_naming_the_count() {
    let dir = tempfile::tempdir().expect("temp dir");
    let flags = FlagValues {
        warm_set_dir: Some(dir.path().to_owned()),
        ..FlagValues::default()
    };
    let lines = |from: usize, to: usize| -> String {
        (from..to)
            .map(|i| format!("  - image: registry.example/warm-{i}:1\n"))
            .collect()
    };
    // Two tables in the file, the rest in the directory: the cap counts both.
    let file =
        toml::from_str::<FileConfig>("[[warm]]\nimage = \"a:1\"\n[[warm]]\nimage = \"b:1\"\n")
            .expect("toml");
    let half = MAX_WARM_ENTRIES / 2;
    std::fs::write(
        dir.path().join("a.yaml"),
        format!("warm:\n{}", lines(0, half)),
    )
    .expect("write");
    std::fs::write(
        dir.path().join("b.yaml"),
        format!("warm:\n{}", lines(half, MAX_WARM_ENTRIES - 2)),
    )
    .expect("write");
    let c = resolve(&file, &flags).expect("exactly the cap is a valid warm set");
    assert_eq!(c.gc.warm.entries().len(), MAX_WARM_ENTRIES);
    std::fs::write(
        dir.path().join("c.yaml"),
        "warm:\n  - image: c:1\n  - image: d:1\n",
    )
    .expect("write");
    let err = resolve(&file, &flags)
        .expect_err("over the cap")
        .to_string();
    assert_eq!(
        err,
        format!(
            "--warm-set-dir: the warm set has {} entries (2 [[warm]] tables, {} in the warm \
             set directory), more than the {MAX_WARM_ENTRIES} a warm set may hold",
            MAX_WARM_ENTRIES + 2,
            MAX_WARM_ENTRIES
        )
    );
    // Too many files: refused before any is read (these are not even valid YAML).
    for i in 0..=crate::warm::MAX_WARM_FILES {
        std::fs::write(dir.path().join(format!("z{i:03}.yaml")), "{{{").expect("write");
    }
    let err = resolve(&FileConfig::default(), &flags)
        .expect_err("too many files")
        .to_string();
    assert_eq!(
        err,
        format!(
            "--warm-set-dir: warm set directory {}: it holds {} warm set files (*.yaml, \
             *.yml, *.json), more than the {} a warm set directory may hold",
            dir.path().display(),
            crate::warm::MAX_WARM_FILES + 4,
            crate::warm::MAX_WARM_FILES
        )
    );
}

/// Issue 41's messages: a negative warm `size` says so (not serde's "did not match any
/// variant of untagged enum SizeSpec"); an `until` past 2262 says the range (it is RFC
/// 3339); a missing warm set directory is not called a config file.
#[test]
fn warm_messages_say_what_is_wrong() {
    let dir = tempfile::tempdir().expect("temp dir");
    let flags = FlagValues {
        warm_set_dir: Some(dir.path().to_owned()),
        ..FlagValues::default()
    };
    std::fs::write(
        dir.path().join("a.yaml"),
        "warm:\n  - image: a:1\n    size: -1\n",
    )
    .expect("write");
    let err = resolve(&FileConfig::default(), &flags)
        .expect_err("negative size")
        .to_string();
    assert!(
        err.contains("a size must not be negative (got -1)") && !err.contains("untagged"),
        "{err}"
    );
    std::fs::write(
        dir.path().join("a.yaml"),
        "warm:\n  - image: a:1\n    size: 1.5\n",
    )
    .expect("write");
    let err = resolve(&FileConfig::default(), &flags)
        .expect_err("fractional size")
        .to_string();
    assert!(err.contains("must be a whole number (got 1.5)"), "{err}");
    std::fs::write(
        dir.path().join("a.yaml"),
        "warm:\n  - image: a:1\n    until: \"9999-12-31T23:59:59Z\"\n",
    )
    .expect("write");
    let err = resolve(&FileConfig::default(), &flags)
        .expect_err("out of range")
        .to_string();
    assert!(
        err.ends_with(
            "a.yaml: warm[0]: until: \"9999-12-31T23:59:59Z\" is outside the times \
             imagekeeper stores (1970-01-01T00:00:00Z to 2262-04-11T23:47:16Z); leave out \
             `until` for an entry kept while it is in the set"
        ),
        "{err}"
    );
    let missing = FlagValues {
        warm_set_dir: Some(dir.path().join("gone")),
        ..FlagValues::default()
    };
    let err = resolve(&FileConfig::default(), &missing)
        .expect_err("missing dir")
        .to_string();
    assert!(
        err.starts_with(&format!(
            "--warm-set-dir: warm set directory {}: cannot read it: No such file",
            dir.path().join("gone").display()
        )) && !err.contains("config file"),
        "{err}"
    );
}
