//! Tests of the pull settings.

use crate::config::tests::resolve;
use crate::config::*;

/// SetDefaults_KubeletConfiguration: a file's maxParallelImagePulls of 2 or more with
/// serializeImagePulls unset defaults it to false; the flag alone is still refused.
#[test]
fn max_parallel_image_pulls_alone_in_the_file_gives_the_parallel_puller() {
    let file = |text: &str| -> FileConfig { toml::from_str(text).expect("toml") };
    let c = resolve(&file("maxParallelImagePulls = 5\n"), &FlagValues::default()).expect("valid");
    assert!(!c.pull.serialize_image_pulls);
    assert_eq!(c.pull.max_parallel_image_pulls, Some(5));
    let c = resolve(&file("maxParallelImagePulls = 1\n"), &FlagValues::default()).expect("valid");
    assert!(c.pull.serialize_image_pulls, "1 keeps the serial default");
    // The file's explicit value wins over the defaulting, and is refused as before.
    let err = resolve(
        &file("serializeImagePulls = true\nmaxParallelImagePulls = 5\n"),
        &FlagValues::default(),
    )
    .expect_err("refused");
    assert!(err.to_string().contains("maxParallelImagePulls"), "{err}");
    // A flag over the defaulted file: the file's default holds.
    let flags = FlagValues {
        max_parallel_image_pulls: Some(3),
        ..FlagValues::default()
    };
    let c = resolve(&file("maxParallelImagePulls = 5\n"), &flags).expect("valid");
    assert!(!c.pull.serialize_image_pulls);
    assert_eq!(c.pull.max_parallel_image_pulls, Some(3));
    // The flag alone: serializeImagePulls is already true, as in the kubelet.
    let err = resolve(&FileConfig::default(), &flags).expect_err("refused");
    assert!(
        err.to_string().contains("--max-parallel-image-pulls"),
        "{err}"
    );
    // --serialize-image-pulls over the file's maxParallelImagePulls is refused.
    let flags = FlagValues {
        serialize_image_pulls: Some(true),
        ..FlagValues::default()
    };
    assert!(resolve(&file("maxParallelImagePulls = 5\n"), &flags).is_err());
}

#[test]
fn a_broken_pull_rule_is_a_typed_pull_error_under_the_setting_that_broke_it() {
    use crate::pull::InvalidPullSetting;
    let file = FileConfig {
        max_parallel_image_pulls: Some(0),
        ..FileConfig::default()
    };
    let flags = FlagValues {
        serialize_image_pulls: Some(false),
        ..FlagValues::default()
    };
    let err = resolve(&file, &flags).expect_err("maxParallelImagePulls 0");
    let ConfigError::Pull { origin, source } = &err else {
        panic!("not a pull settings error: {err:?}");
    };
    assert_eq!(origin, "maxParallelImagePulls in /etc/ik.toml");
    assert_eq!(
        source.0,
        vec![InvalidPullSetting::MaxParallelImagePullsNotPositive(0)]
    );
    let cause = std::error::Error::source(&err).map(ToString::to_string);
    assert_eq!(
        cause.as_deref(),
        Some("invalid configuration: maxParallelImagePulls 0 must be a positive number")
    );
    assert_eq!(
        err.to_string(),
        "maxParallelImagePulls in /etc/ik.toml: invalid configuration: maxParallelImagePulls 0 must be a positive number"
    );
}
