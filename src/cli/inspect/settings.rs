//! The GC settings `inspect explain` and `inspect workload` evaluate, resolved as `run`
//! resolves them ([`imagekeeper::config::AgentConfig::resolve`], no second copy of a default):
//! the agent's config file (`--config`), then `--set KEY=VALUE`, then the flags `run` has
//! ([`SettingFlags`]). Each command lists on `--help` only the flags of the settings it
//! evaluates ([`SettingsScope::KEYS`]); `run`'s other setting flags stay accepted, hidden,
//! each warning once that it has no effect there (as does a `--set` of such a key). Their own
//! older flags (`--high`, `--low`, `--min-age`, `--max-age`: [`InspectOldFlags`], declared in
//! the settings table's entries as `inspect_old`) keep working as explicit flags for the
//! setting they duplicate, hidden from `--help`, each warning once naming `run`'s flag and the
//! key; one given beside its replacement is a usage error. Invariants: an explicit flag wins
//! over `--set`, which wins over the file, which wins over the default; every error names the
//! flag, key or file the bad value came from (the older flag when that is what was given);
//! every error is a usage error (exit 2); a command reads of the resolved configuration only
//! [`SettingsScope::settings`], which changes with exactly the keys of [`SettingsScope::KEYS`]
//! (a test holds each command to it).

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use imagekeeper::config::{AgentConfig, ConfigError, FlagValues};
use imagekeeper::gc::GcConfig;

use super::super::Failure;
use super::super::agent_flags::{
    FlagScope, GivenFlag, InspectOldFlags, SettingFlags, resolve_file_and_flags,
};

/// An `inspect` command that evaluates some of `run`'s settings: its name, the config keys it
/// evaluates, and what it reads of the resolved configuration.
pub(super) trait SettingsScope {
    /// The command, as warnings name it.
    const COMMAND: &'static str;
    /// The keys whose settings change what the command prints.
    const KEYS: &'static [&'static str];
    /// What the command reads of the resolved configuration.
    type Settings: std::fmt::Debug + PartialEq;
    /// That, from the resolved configuration.
    fn settings(config: AgentConfig) -> Self::Settings;
}

/// `inspect explain`: the GC policy (thresholds, ages, byte budget and inode thresholds), the
/// space pass's order, the pinned patterns, the irreplaceable images kept (with the sandbox
/// image) and the kubelet's pull records; not the pulls, the runtime's endpoints, the
/// journal's retention, the warm set, the container events nor the runtime pins.
#[derive(Debug)]
pub(super) struct Explain;

impl SettingsScope for Explain {
    const COMMAND: &'static str = "inspect explain";
    const KEYS: &'static [&'static str] = &[
        "imageGCHighThresholdPercent",
        "imageGCLowThresholdPercent",
        "imageGCHighInodesThresholdPercent",
        "imageGCLowInodesThresholdPercent",
        "imageGCHighBytes",
        "imageGCLowBytes",
        "imageMinimumGCAge",
        "imageMaximumGCAge",
        "pinnedImages",
        "podInfraContainerImage",
        "protectIrreplaceable",
        "kubeletRootDir",
        "kubeletIntentMaxAge",
        "imageGCPolicy",
    ];
    type Settings = GcConfig;

    /// The GC's configuration without the journal's retention and the warm set (explain
    /// reads the journal as it is and judges no warm entry).
    fn settings(config: AgentConfig) -> GcConfig {
        GcConfig {
            journal_retention: None,
            warm: Default::default(),
            ..config.gc
        }
    }
}

/// `inspect workload`: the node line's policy, the kubelet's thresholds and ages.
#[derive(Debug)]
pub(super) struct Workload;

/// What `inspect workload` writes of the settings: the node line's policy.
#[derive(Debug, PartialEq)]
pub(super) struct WorkloadPolicy {
    pub(super) high: i64,
    pub(super) low: i64,
    pub(super) min_age: Duration,
    pub(super) max_age: Duration,
}

impl SettingsScope for Workload {
    const COMMAND: &'static str = "inspect workload";
    const KEYS: &'static [&'static str] = &[
        "imageGCHighThresholdPercent",
        "imageGCLowThresholdPercent",
        "imageMinimumGCAge",
        "imageMaximumGCAge",
    ];
    type Settings = WorkloadPolicy;

    fn settings(config: AgentConfig) -> WorkloadPolicy {
        let p = config.gc.policy;
        WorkloadPolicy {
            high: p.high_threshold_percent,
            low: p.low_threshold_percent,
            min_age: p.min_age,
            max_age: p.max_age,
        }
    }
}

/// A command's setting flags on `--help` are those of its keys.
impl<S: SettingsScope> FlagScope for S {
    fn evaluates(key: &str) -> bool {
        S::KEYS.contains(&key)
    }
}

/// `--config`, `--set`, `run`'s setting flags (those `S` evaluates on `--help`) and the older
/// flags the settings table gives `inspect` (`--high`, `--low`, `--min-age`, `--max-age`).
#[derive(Args, Debug)]
pub(super) struct GcSettingArgs<S: SettingsScope> {
    /// The agent's config file (TOML, KubeletConfiguration's field names: the keys of
    /// docs/src/reference/config.md): its GC settings are evaluated, as `run` reads them;
    /// --set and the flags win over it.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    #[command(flatten)]
    settings: SettingFlags<S>,
    #[command(flatten)]
    old: InspectOldFlags,
}

impl<S: SettingsScope> GcSettingArgs<S> {
    /// The flags given, an older flag as the `run` flag it duplicates (clap refuses both).
    fn values(&self) -> FlagValues {
        let mut values = self.settings.values();
        self.old.apply(&mut values);
        values
    }

    /// The warnings of the flags given: those without effect here (and `--set`s of their
    /// keys), `run`'s deprecated ones (unless without effect) and the older ones.
    fn deprecations(&self) -> Vec<String> {
        let given = self.settings.given();
        let without_effect = given.iter().filter(|f| !S::evaluates(f.key)).map(|f| {
            let (flag, key) = (f.flag, f.key);
            format!("warning: {flag} ({key}) has no effect on {}", S::COMMAND)
        });
        let keys_set = self.settings.values().set.keys_given();
        let set_without_effect = keys_set
            .into_iter()
            .filter(|key| !S::evaluates(key))
            .map(|key| format!("warning: --set {key} has no effect on {}", S::COMMAND));
        let deprecated = given
            .iter()
            .filter(|f| S::evaluates(f.key))
            .filter_map(GivenFlag::deprecation);
        let old = self.old.given().into_iter().map(|f| f.deprecation());
        without_effect
            .chain(set_without_effect)
            .chain(deprecated)
            .chain(old)
            .collect()
    }

    /// Warns once per deprecated or ineffective flag given, loads the file (if any) and
    /// resolves the configuration as `run` does; every error is a usage error. What `S`
    /// evaluates of it.
    pub(super) fn resolve(&self) -> Result<S::Settings, Failure> {
        for line in self.deprecations() {
            eprintln!("{line}");
        }
        resolve_file_and_flags(self.config.as_deref(), &self.values(), |e| {
            self.naming_old_flags(e)
        })
        .map(S::settings)
    }

    /// The error with `run`'s flag named as the older flag given in its place.
    fn naming_old_flags(&self, e: ConfigError) -> ConfigError {
        let ConfigError::Invalid { origin, message } = e else {
            return e;
        };
        let old = self.old.given();
        let origin = origin
            .split(" and ")
            .map(|part| old.iter().find(|f| f.run == part).map_or(part, |f| f.old))
            .collect::<Vec<_>>()
            .join(" and ");
        ConfigError::Invalid { origin, message }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;
    use imagekeeper::config::{CONFIG_FIELDS, FileConfig, FlagStatus};

    use super::*;

    /// One file per setting that moves it off its default (with the companions its rule
    /// needs); `dir` holds a warm set directory. A new setting needs its line.
    fn off_default(dir: &str) -> Vec<(&'static str, String)> {
        vec![
            (
                "imageGCHighThresholdPercent",
                "imageGCHighThresholdPercent = 90".into(),
            ),
            (
                "imageGCLowThresholdPercent",
                "imageGCLowThresholdPercent = 70".into(),
            ),
            (
                "imageGCHighInodesThresholdPercent",
                "imageGCHighInodesThresholdPercent = 90\nimageGCLowInodesThresholdPercent = 60"
                    .into(),
            ),
            (
                "imageGCLowInodesThresholdPercent",
                "imageGCHighInodesThresholdPercent = 95\nimageGCLowInodesThresholdPercent = 50"
                    .into(),
            ),
            (
                "imageGCHighBytes",
                "imageGCHighBytes = \"2Gi\"\nimageGCLowBytes = 1073741824".into(),
            ),
            (
                "imageGCLowBytes",
                "imageGCHighBytes = \"3G\"\nimageGCLowBytes = \"1G\"".into(),
            ),
            ("imageMinimumGCAge", "imageMinimumGCAge = \"5m\"".into()),
            ("imageMaximumGCAge", "imageMaximumGCAge = \"72h\"".into()),
            ("serializeImagePulls", "serializeImagePulls = false".into()),
            (
                "maxParallelImagePulls",
                "serializeImagePulls = false\nmaxParallelImagePulls = 3".into(),
            ),
            ("registryPullQPS", "registryPullQPS = 2.5".into()),
            ("registryBurst", "registryBurst = 20".into()),
            ("pinnedImages", "pinnedImages = [\"busybox:1\"]".into()),
            (
                "podInfraContainerImage",
                "podInfraContainerImage = \"registry.k8s.io/pause:3.10\"".into(),
            ),
            (
                "protectIrreplaceable",
                "protectIrreplaceable = false".into(),
            ),
            (
                "containerRuntimeEndpoint",
                "containerRuntimeEndpoint = \"unix:///run/crio/crio.sock\"".into(),
            ),
            (
                "imageServiceEndpoint",
                "imageServiceEndpoint = \"unix:///run/images.sock\"".into(),
            ),
            ("kubeletRootDir", "kubeletRootDir = \"\"".into()),
            ("kubeletIntentMaxAge", "kubeletIntentMaxAge = \"2h\"".into()),
            ("containerEvents", "containerEvents = \"off\"".into()),
            ("clusterSignals", "clusterSignals = true".into()),
            ("keepSets", "keepSets = true".into()),
            (
                "clusterSignalsCronJobLead",
                "clusterSignalsCronJobLead = \"30m\"".into(),
            ),
            (
                "clusterSignalsKeepShare",
                "clusterSignalsKeepShare = 70".into(),
            ),
            (
                "clusterSignalsPrefetchPullSecrets",
                "clusterSignalsPrefetchPullSecrets = true".into(),
            ),
            (
                "diskAccountingPeriod",
                "diskAccountingPeriod = \"1h\"".into(),
            ),
            ("diskPruneOrphans", "diskPruneOrphans = \"24h\"".into()),
            ("runtimePins", "runtimePins = \"off\"".into()),
            (
                "containerdAddress",
                "containerdAddress = \"/run/k3s/containerd/containerd.sock\"".into(),
            ),
            ("imageGCPolicy", "imageGCPolicy = \"predictive\"".into()),
            ("journalMaxAge", "journalMaxAge = \"48h\"".into()),
            ("journalMaxEntries", "journalMaxEntries = 500".into()),
            (
                "imageCredentialProviderConfig",
                format!(
                    "imageCredentialProviderConfig = \"{dir}/p.yaml\"\n\
                     imageCredentialProviderBinDir = \"{dir}\""
                ),
            ),
            (
                "imageCredentialProviderBinDir",
                format!(
                    "imageCredentialProviderConfig = \"{dir}/q.yaml\"\n\
                     imageCredentialProviderBinDir = \"{dir}/bin\""
                ),
            ),
            ("warm", "warm = [{ image = \"busybox:1\" }]".into()),
            ("warmSetDir", format!("warmSetDir = \"{dir}/warm\"")),
            ("warmPeriod", "warmPeriod = \"10m\"".into()),
            ("warmParallelPulls", "warmParallelPulls = 4".into()),
            (
                "warmFromHistory",
                "warmFromHistory = { usedWithin = \"2h\" }".into(),
            ),
        ]
    }

    /// The keys whose setting changes what `S` reads of the configuration.
    fn keys_that_change<S: SettingsScope>(dir: &str) -> Vec<&'static str> {
        let defaults = S::settings(AgentConfig::defaults().expect("the defaults are valid"));
        off_default(dir)
            .into_iter()
            .filter(|(key, text)| {
                let file: FileConfig =
                    toml::from_str(text).unwrap_or_else(|e| panic!("{key}: {text}: {e}"));
                let config = AgentConfig::resolve(&file, None, &FlagValues::default())
                    .unwrap_or_else(|e| panic!("{key}: {text}: {e}"));
                S::settings(config) != defaults
            })
            .map(|(key, _)| key)
            .collect()
    }

    /// Issue 38: `inspect explain` and `inspect workload` evaluate exactly the settings they
    /// say they do: a setting moved off its default changes what each reads of the
    /// configuration if and only if its key is in the command's list (which decides what
    /// its `--help` shows). Every declared setting is tried.
    #[test]
    fn each_inspect_command_evaluates_exactly_the_settings_it_lists() {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::create_dir(dir.path().join("warm")).expect("warm dir");
        std::fs::write(
            dir.path().join("warm/a.yaml"),
            "warm:\n  - image: busybox:1\n",
        )
        .expect("warm file");
        let root = dir.path().to_str().expect("utf8");
        let tried: Vec<&str> = off_default(root).iter().map(|(k, _)| *k).collect();
        let declared: Vec<&str> = CONFIG_FIELDS.iter().map(|f| f.key).collect();
        assert_eq!(tried, declared, "every declared setting needs its line");
        assert_eq!(keys_that_change::<Explain>(root), Explain::KEYS);
        assert_eq!(keys_that_change::<Workload>(root), Workload::KEYS);
    }

    /// The options a command's `--help` lists.
    fn listed_options(path: &[&str]) -> Vec<String> {
        let args = std::iter::once("imagekeeper")
            .chain(path.iter().copied())
            .chain(["--help"]);
        let help = crate::cli::Cli::try_parse_from(args)
            .expect_err("--help stops the parse")
            .to_string();
        help.lines()
            .map(str::trim_start)
            .filter(|l| l.starts_with("--"))
            .filter_map(|l| l.split([' ', '=', '[']).next())
            .map(str::to_owned)
            .collect()
    }

    fn help_lists_only_its_settings<S: SettingsScope>(path: &[&str]) {
        let listed = listed_options(path);
        for want in ["--config", "--set"] {
            assert!(listed.iter().any(|o| o == want), "{want}: {listed:?}");
        }
        for field in CONFIG_FIELDS {
            let Some(flag) = field.flag_name else {
                continue;
            };
            let shown = listed.iter().any(|o| o == flag);
            let should =
                S::KEYS.contains(&field.key) && field.flag_status == Some(FlagStatus::Kept);
            assert_eq!(
                shown, should,
                "{path:?} --help and {flag} ({}): {listed:?}",
                field.key
            );
        }
    }

    /// Issue 38: `inspect explain --help` and `inspect workload --help` list `--config`,
    /// `--set` and the kept flags of the settings they evaluate, and no other of `run`'s
    /// setting flags (`--registry-qps`, `--container-runtime-endpoint`, ... have no effect
    /// there).
    #[test]
    fn explain_and_workload_help_list_no_setting_flag_without_effect() {
        help_lists_only_its_settings::<Explain>(&["inspect", "explain"]);
        help_lists_only_its_settings::<Workload>(&["inspect", "workload"]);
        let workload = listed_options(&["inspect", "workload"]);
        assert!(
            !workload.iter().any(|o| o == "--kubelet-root-dir"),
            "{workload:?}"
        );
    }

    #[derive(Parser, Debug)]
    struct ExplainFlags {
        #[command(flatten)]
        settings: GcSettingArgs<Explain>,
    }

    /// Issue 38: a setting flag without effect on a command is still accepted (a script
    /// passing `run`'s flags keeps working), warns once that it has no effect (instead of a
    /// deprecation warning), as does a `--set` of such a key; a deprecated flag with an effect
    /// warns as deprecated.
    #[test]
    fn a_setting_flag_without_effect_is_accepted_and_warns_so() {
        let flags = ExplainFlags::try_parse_from([
            "explain",
            "--registry-qps",
            "5",
            "--journal-max-age",
            "1h",
            "--set",
            "warmPeriod=5m",
            "--image-gc-policy",
            "adaptive",
        ])
        .expect("run's flags parse");
        assert_eq!(
            flags.settings.deprecations(),
            [
                "warning: --registry-qps (registryPullQPS) has no effect on inspect explain",
                "warning: --journal-max-age (journalMaxAge) has no effect on inspect explain",
                "warning: --set warmPeriod has no effect on inspect explain",
                "warning: --image-gc-policy is deprecated; use --set imageGCPolicy=... or the \
                 config file key imageGCPolicy",
            ]
        );
        let Ok(gc) = flags.settings.resolve() else {
            panic!("valid settings refused");
        };
        assert_eq!(gc.order, imagekeeper::gc::GcOrder::Adaptive);
        let quiet = ExplainFlags::try_parse_from(["explain", "--image-gc-high-threshold", "90"])
            .expect("parses");
        assert!(quiet.settings.deprecations().is_empty());
    }

    /// Issue 38: each older flag of `inspect` (the settings table's `inspect_old`) sets what
    /// the `run` flag it duplicates sets, warns once naming that flag and the key, is hidden
    /// from `--help`, and beside that flag is a usage error (exit 2).
    #[test]
    fn an_older_flag_works_as_its_run_flag_hidden_warning_and_refused_beside_it() {
        let explain = listed_options(&["inspect", "explain"]);
        let workload = listed_options(&["inspect", "workload"]);
        for (old, run, key, value) in [
            (
                "--high",
                "--image-gc-high-threshold",
                "imageGCHighThresholdPercent",
                "90",
            ),
            (
                "--low",
                "--image-gc-low-threshold",
                "imageGCLowThresholdPercent",
                "70",
            ),
            (
                "--min-age",
                "--minimum-image-ttl-duration",
                "imageMinimumGCAge",
                "90m",
            ),
            (
                "--max-age",
                "--image-maximum-gc-age",
                "imageMaximumGCAge",
                "72h",
            ),
        ] {
            let by_old = ExplainFlags::try_parse_from(["explain", old, value]).expect(old);
            let by_run = ExplainFlags::try_parse_from(["explain", run, value]).expect(run);
            let (Ok(from_old), Ok(from_run)) =
                (by_old.settings.resolve(), by_run.settings.resolve())
            else {
                panic!("{old} {value} or {run} {value} refused");
            };
            assert_eq!(from_old, from_run, "{old}");
            assert_ne!(
                from_old,
                Explain::settings(AgentConfig::defaults().expect("valid")),
                "{old}"
            );
            assert_eq!(
                by_old.settings.deprecations(),
                [format!(
                    "warning: {old} is deprecated; use {run} (as `run`), --set {key}=... or the \
                     config file key {key}"
                )]
            );
            assert!(!explain.iter().any(|o| o == old), "{old}: {explain:?}");
            assert!(!workload.iter().any(|o| o == old), "{old}: {workload:?}");
            let both = ExplainFlags::try_parse_from(["explain", old, value, run, value])
                .expect_err("both refused");
            assert_eq!(
                both.kind(),
                clap::error::ErrorKind::ArgumentConflict,
                "{old}"
            );
            assert_eq!(both.exit_code(), i32::from(crate::cli::EXIT_USAGE), "{old}");
        }
    }
}
