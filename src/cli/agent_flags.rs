//! The flags shared by `run`, `gc`, `prune`, `doctor`, `pin` and `restore`: `--config`, the
//! process-level `--db` and `--admin-socket`, and [`SettingFlags`]: one flag per setting the
//! settings table gives a flag (`imagekeeper::imagekeeper_settings!`, generated here: kubelet's
//! names and defaults, deprecated ones hidden and warning) and the generic `--set KEY=VALUE`.
//! `inspect explain` and `inspect workload` take [`SettingFlags`] too, scoped to the settings
//! they evaluate ([`FlagScope`]: the other flags hidden), and [`InspectOldFlags`], their older
//! flags, generated from the entries' `inspect_old` (`src/cli/inspect/settings.rs`).

use std::marker::PhantomData;
use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use imagekeeper::agent::ConfigSource;
use imagekeeper::config::{
    AgentConfig, DEFAULT_ADMIN_SOCKET, DEFAULT_DB, FileConfig, FlagStatus, FlagValues, flag_help,
};

use super::Failure;

/// Whether a flag was given: `Some`, or a repeatable flag given at least once.
trait Given {
    fn given(&self) -> bool;
}

impl<T> Given for Option<T> {
    fn given(&self) -> bool {
        self.is_some()
    }
}

impl<T> Given for Vec<T> {
    fn given(&self) -> bool {
        !self.is_empty()
    }
}

/// `--set KEY=VALUE`, read as the file reads KEY ([`imagekeeper::config::parse_set`]).
fn parse_set(arg: &str) -> Result<FileConfig, String> {
    imagekeeper::config::parse_set(arg).map_err(|e| e.to_string())
}

/// Which settings a command evaluates: the flags of the others stay accepted, hidden from
/// its `--help`.
pub trait FlagScope {
    /// Whether the command evaluates the setting `key`.
    fn evaluates(key: &str) -> bool;
}

/// `run`, `gc`, `prune`, `doctor`, `pin` and `restore`: every setting.
#[derive(Debug, Clone, Copy)]
pub struct EverySetting;

impl FlagScope for EverySetting {
    fn evaluates(_: &str) -> bool {
        true
    }
}

/// A setting flag given: its name, its key and whether it is deprecated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GivenFlag {
    /// `--journal-max-age`.
    pub flag: &'static str,
    /// `journalMaxAge`.
    pub key: &'static str,
    /// Kept, or deprecated (warning).
    pub status: FlagStatus,
}

impl GivenFlag {
    /// The warning of a deprecated flag, naming the key that replaces it.
    pub fn deprecation(&self) -> Option<String> {
        (self.status == FlagStatus::Deprecated).then(|| {
            format!(
                "warning: {} is deprecated; use --set {}=... or the config file key {}",
                self.flag, self.key, self.key
            )
        })
    }
}

/// An older flag of `inspect explain` and `inspect workload` given: it, the `run` flag it
/// duplicates and that flag's key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GivenInspectOld {
    /// `--high`.
    pub old: &'static str,
    /// `--image-gc-high-threshold`.
    pub run: &'static str,
    /// `imageGCHighThresholdPercent`.
    pub key: &'static str,
}

impl GivenInspectOld {
    /// Its warning, naming the `run` flag and the key that replace it.
    pub fn deprecation(&self) -> String {
        let (old, run, key) = (self.old, self.run, self.key);
        format!(
            "warning: {old} is deprecated; use {run} (as `run`), --set {key}=... or the config \
             file key {key}"
        )
    }
}

/// The binary's callback of the settings table: the clap flags ([`SettingFlags`], and
/// [`InspectOldFlags`] for the entries naming an `inspect_old` flag), what was given, and the
/// values.
macro_rules! agent_flags_from_table {
    (
        settings: $settings:tt
        flags: [ $( (
            $key:literal, $ff:ident : $fty:ty = $fname:literal, $status:ident,
            ( $($attribute:tt)* ), $help:literal,
            [ $( $old:ident = $old_name:literal, ( $($old_attribute:tt)* ) )? ]
        ) )* ]
    ) => {
        /// `--set KEY=VALUE` and one flag per setting that has one: what every command
        /// reading the agent's settings takes, beside its `--config`. A deprecated flag, or
        /// one of a setting the command does not evaluate (`S`), is hidden from `--help`.
        #[derive(Args, Debug, Clone)]
        pub struct SettingFlags<S: FlagScope = EverySetting> {
            /// Set a config file key, as the file would (repeatable): VALUE is read as TOML
            /// (85, true, ["a","b"], {usedWithin="1h"}), else as text (2m, 500Gi). Over the file,
            /// under a flag; the keys: docs/src/reference/config.md.
            #[arg(long = "set", value_name = "KEY=VALUE", value_parser = parse_set)]
            pub set: Vec<FileConfig>,
            $(
                #[arg(
                    long = $fname,
                    hide = FlagStatus::$status.hidden() || !S::evaluates($key),
                    help = flag_help($key),
                    $($attribute)*
                )]
                pub $ff: $fty,
            )*
            #[arg(skip)]
            scope: PhantomData<S>,
        }

        impl<S: FlagScope> SettingFlags<S> {
            /// The flags given, the `--set`s folded in order (a later one wins).
            pub fn values(&self) -> FlagValues {
                let mut set = FileConfig::default();
                for one in &self.set {
                    set.overlay(one);
                }
                FlagValues {
                    set,
                    $( $ff: self.$ff.clone(), )*
                    ..FlagValues::default()
                }
            }

            /// The setting flags given, in the table's order.
            pub fn given(&self) -> Vec<GivenFlag> {
                let mut given = Vec::new();
                $(
                    if self.$ff.given() {
                        given.push(GivenFlag {
                            flag: concat!("--", $fname),
                            key: $key,
                            status: FlagStatus::$status,
                        });
                    }
                )*
                given
            }
        }

        /// The older flags of `inspect explain` and `inspect workload`, each for the setting
        /// flag it duplicates: hidden, refused beside that flag.
        #[derive(Args, Debug, Clone)]
        #[group(skip)]
        pub struct InspectOldFlags {
            $( $(
                #[arg(
                    long = $old_name,
                    hide = true,
                    help = concat!("Deprecated: --", $fname),
                    conflicts_with = stringify!($ff),
                    $($old_attribute)*
                )]
                pub $old: $fty,
            )? )*
        }

        impl InspectOldFlags {
            /// The older flags given, in the table's order.
            pub fn given(&self) -> Vec<GivenInspectOld> {
                let mut given = Vec::new();
                $( $(
                    if self.$old.given() {
                        given.push(GivenInspectOld {
                            old: concat!("--", $old_name),
                            run: concat!("--", $fname),
                            key: $key,
                        });
                    }
                )? )*
                given
            }

            /// `values` with each older flag given as the flag it duplicates.
            pub fn apply(&self, values: &mut FlagValues) {
                $( $(
                    if !values.$ff.given() {
                        values.$ff = self.$old.clone();
                    }
                )? )*
            }
        }
    };
}

imagekeeper::imagekeeper_settings!(agent_flags_from_table);

#[derive(Args, Debug, Clone)]
pub struct AgentFlags {
    /// A TOML file with KubeletConfiguration's field names (the keys of
    /// docs/src/reference/config.md); --set and flags win over it. `run` reads it again
    /// on SIGHUP.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    #[arg(long, value_name = "PATH", help = format!("The record database [default: {DEFAULT_DB}]."))]
    pub db: Option<PathBuf>,
    #[arg(long, value_name = "PATH", help = format!("The agent's admin socket [default: {DEFAULT_ADMIN_SOCKET}]."))]
    pub admin_socket: Option<PathBuf>,
    #[command(flatten)]
    pub settings: SettingFlags,
}

impl AgentFlags {
    /// The flags given, the `--set`s folded in order (a later one wins).
    pub fn values(&self) -> FlagValues {
        FlagValues {
            db: self.db.clone(),
            admin_socket: self.admin_socket.clone(),
            ..self.settings.values()
        }
    }

    /// One line on stderr per deprecated flag given, naming the key that replaces it.
    pub fn warn_deprecated(&self) {
        for line in self.deprecations() {
            eprintln!("{line}");
        }
    }

    /// The deprecation warnings of the flags given.
    pub fn deprecations(&self) -> Vec<String> {
        let given = self.settings.given();
        given.iter().filter_map(GivenFlag::deprecation).collect()
    }

    /// Where the configuration comes from: the file and the flags given (plus `extra`, the
    /// flags of `run` alone). A reload reads the same source again. Warns once per deprecated
    /// flag given.
    pub fn source(&self, extra: FlagValues) -> ConfigSource {
        self.warn_deprecated();
        let mut flags = self.values();
        flags.metrics_address = extra.metrics_address;
        flags.detect_period = extra.detect_period;
        flags.gc_period = extra.gc_period;
        flags.image_cache_period = extra.image_cache_period;
        ConfigSource {
            file: self.config.clone(),
            flags,
        }
    }

    /// Loads the file (if any) and resolves the configuration; every error is a usage error.
    pub fn resolve(&self, extra: FlagValues) -> Result<AgentConfig, Failure> {
        resolve_source(&self.source(extra))
    }
}

/// Loads the source's file (if any) and resolves it; every error is a usage error.
pub fn resolve_source(source: &ConfigSource) -> Result<AgentConfig, Failure> {
    resolve_file_and_flags(source.file.as_deref(), &source.flags, |e| e)
}

/// Loads `file` (if any) and resolves it under `flags`; every error is a usage error. A
/// refusal passes through `rename` first (`inspect` names the old flag given in place of
/// `run`'s).
pub fn resolve_file_and_flags(
    file: Option<&std::path::Path>,
    flags: &FlagValues,
    rename: impl FnOnce(imagekeeper::config::ConfigError) -> imagekeeper::config::ConfigError,
) -> Result<AgentConfig, Failure> {
    let loaded = match file {
        Some(path) => FileConfig::load(path).map_err(Failure::usage)?,
        None => FileConfig::default(),
    };
    AgentConfig::resolve(&loaded, file, flags)
        .map_err(rename)
        .context("invalid configuration")
        .map_err(Failure::usage)
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, Parser};
    use imagekeeper::config::CONFIG_FIELDS;

    use super::*;

    #[derive(Parser, Debug)]
    struct Flags {
        #[command(flatten)]
        flags: AgentFlags,
    }

    fn parse(args: &[&str]) -> Result<AgentFlags, clap::Error> {
        let argv = std::iter::once("imagekeeper").chain(args.iter().copied());
        Flags::try_parse_from(argv).map(|f| f.flags)
    }

    /// The configuration `args` give, without a file.
    fn resolved(args: &[&str]) -> AgentConfig {
        let flags = parse(args).unwrap_or_else(|e| panic!("{args:?}: {e}"));
        without_origins(
            AgentConfig::resolve(&FileConfig::default(), None, &flags.values())
                .unwrap_or_else(|e| panic!("{args:?}: {e}")),
        )
    }

    /// The configuration with its warm entries' origins (`warm[0] in FILE`, `--set warm[0]`:
    /// where each came from, for messages) left out: the values are what must match.
    fn without_origins(mut config: AgentConfig) -> AgentConfig {
        let mut entries = config.gc.warm.entries().to_vec();
        for entry in &mut entries {
            entry.origin.clear();
        }
        let from_history = config.gc.warm.from_history;
        config.gc.warm = imagekeeper::warm::WarmSet::new(entries).with_from_history(from_history);
        config
    }

    /// A setting's key, the TOML lines that set it, and the same through its flags.
    type Case = (&'static str, Vec<String>, Option<Vec<String>>);

    /// One case per setting: the TOML lines that set it (with the companions its rule needs)
    /// and, where it has a flag, the same through the flags. A new setting needs its case.
    fn cases(dir: &str) -> Vec<Case> {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<String>>();
        let warm_dir = format!("{dir}/warm");
        let providers = format!("{dir}/providers.yaml");
        vec![
            (
                "imageGCHighThresholdPercent",
                s(&["imageGCHighThresholdPercent = 90"]),
                Some(s(&["--image-gc-high-threshold", "90"])),
            ),
            (
                "imageGCLowThresholdPercent",
                s(&["imageGCLowThresholdPercent = 70"]),
                Some(s(&["--image-gc-low-threshold", "70"])),
            ),
            (
                "imageGCHighInodesThresholdPercent",
                s(&[
                    "imageGCHighInodesThresholdPercent = 90",
                    "imageGCLowInodesThresholdPercent = 60",
                ]),
                Some(s(&[
                    "--image-gc-high-inodes-threshold",
                    "90",
                    "--image-gc-low-inodes-threshold",
                    "60",
                ])),
            ),
            (
                "imageGCLowInodesThresholdPercent",
                s(&[
                    "imageGCHighInodesThresholdPercent = 95",
                    "imageGCLowInodesThresholdPercent = 50",
                ]),
                Some(s(&[
                    "--image-gc-high-inodes-threshold",
                    "95",
                    "--image-gc-low-inodes-threshold",
                    "50",
                ])),
            ),
            (
                "imageGCHighBytes",
                s(&["imageGCHighBytes = \"2Gi\"", "imageGCLowBytes = 1073741824"]),
                Some(s(&[
                    "--image-gc-high-bytes",
                    "2Gi",
                    "--image-gc-low-bytes",
                    "1Gi",
                ])),
            ),
            (
                "imageGCLowBytes",
                s(&["imageGCHighBytes = \"3G\"", "imageGCLowBytes = \"1G\""]),
                Some(s(&[
                    "--image-gc-high-bytes",
                    "3G",
                    "--image-gc-low-bytes",
                    "1G",
                ])),
            ),
            (
                "imageMinimumGCAge",
                s(&["imageMinimumGCAge = \"5m\""]),
                Some(s(&["--minimum-image-ttl-duration", "5m"])),
            ),
            (
                "imageMaximumGCAge",
                s(&["imageMaximumGCAge = \"72h\""]),
                Some(s(&["--image-maximum-gc-age", "72h"])),
            ),
            (
                "serializeImagePulls",
                s(&["serializeImagePulls = false"]),
                Some(s(&["--serialize-image-pulls", "false"])),
            ),
            (
                "maxParallelImagePulls",
                s(&["serializeImagePulls = false", "maxParallelImagePulls = 3"]),
                Some(s(&[
                    "--serialize-image-pulls",
                    "false",
                    "--max-parallel-image-pulls",
                    "3",
                ])),
            ),
            (
                "registryPullQPS",
                s(&["registryPullQPS = 2.5"]),
                Some(s(&["--registry-qps", "2.5"])),
            ),
            (
                "registryBurst",
                s(&["registryBurst = 20"]),
                Some(s(&["--registry-burst", "20"])),
            ),
            (
                "pinnedImages",
                s(&["pinnedImages = [\"registry.k8s.io/pause:*\", \"busybox:1\"]"]),
                Some(s(&[
                    "--pinned-image",
                    "registry.k8s.io/pause:*",
                    "--pinned-image",
                    "busybox:1",
                ])),
            ),
            (
                "podInfraContainerImage",
                s(&["podInfraContainerImage = \"registry.k8s.io/pause:3.10\""]),
                Some(s(&[
                    "--pod-infra-container-image",
                    "registry.k8s.io/pause:3.10",
                ])),
            ),
            (
                "protectIrreplaceable",
                s(&["protectIrreplaceable = false"]),
                Some(s(&["--protect-irreplaceable", "false"])),
            ),
            (
                "containerRuntimeEndpoint",
                s(&["containerRuntimeEndpoint = \"unix:///run/crio/crio.sock\""]),
                Some(s(&[
                    "--container-runtime-endpoint",
                    "unix:///run/crio/crio.sock",
                ])),
            ),
            (
                "imageServiceEndpoint",
                s(&["imageServiceEndpoint = \"unix:///run/images.sock\""]),
                Some(s(&["--image-service-endpoint", "unix:///run/images.sock"])),
            ),
            (
                "kubeletRootDir",
                s(&["kubeletRootDir = \"\""]),
                Some(s(&["--kubelet-root-dir", ""])),
            ),
            (
                "kubeletIntentMaxAge",
                s(&["kubeletIntentMaxAge = \"2h\""]),
                Some(s(&["--kubelet-intent-max-age", "2h"])),
            ),
            (
                "containerEvents",
                s(&["containerEvents = \"off\""]),
                Some(s(&["--container-events", "off"])),
            ),
            ("clusterSignals", s(&["clusterSignals = true"]), None),
            ("keepSets", s(&["keepSets = true"]), None),
            (
                "clusterSignalsCronJobLead",
                s(&["clusterSignalsCronJobLead = \"30m\""]),
                None,
            ),
            (
                "clusterSignalsKeepShare",
                s(&["clusterSignalsKeepShare = 70"]),
                None,
            ),
            (
                "clusterSignalsPrefetchPullSecrets",
                s(&["clusterSignalsPrefetchPullSecrets = true"]),
                None,
            ),
            (
                "diskAccountingPeriod",
                s(&["diskAccountingPeriod = \"1h\""]),
                None,
            ),
            ("diskPruneOrphans", s(&["diskPruneOrphans = \"24h\""]), None),
            (
                "runtimePins",
                s(&["runtimePins = \"off\""]),
                Some(s(&["--runtime-pins", "off"])),
            ),
            (
                "containerdAddress",
                s(&["containerdAddress = \"/run/k3s/containerd/containerd.sock\""]),
                Some(s(&[
                    "--containerd-address",
                    "/run/k3s/containerd/containerd.sock",
                ])),
            ),
            (
                "imageGCPolicy",
                s(&["imageGCPolicy = \"predictive\""]),
                Some(s(&["--image-gc-policy", "predictive"])),
            ),
            (
                "journalMaxAge",
                s(&["journalMaxAge = \"48h\""]),
                Some(s(&["--journal-max-age", "48h"])),
            ),
            (
                "journalMaxEntries",
                s(&["journalMaxEntries = 500"]),
                Some(s(&["--journal-max-entries", "500"])),
            ),
            (
                "imageCredentialProviderConfig",
                vec![
                    format!("imageCredentialProviderConfig = \"{providers}\""),
                    format!("imageCredentialProviderBinDir = \"{dir}\""),
                ],
                Some(vec![
                    "--image-credential-provider-config".into(),
                    providers.clone(),
                    "--image-credential-provider-bin-dir".into(),
                    dir.into(),
                ]),
            ),
            (
                "imageCredentialProviderBinDir",
                vec![
                    format!("imageCredentialProviderConfig = \"{dir}/other.yaml\""),
                    format!("imageCredentialProviderBinDir = \"{dir}/bin\""),
                ],
                Some(vec![
                    "--image-credential-provider-config".into(),
                    format!("{dir}/other.yaml"),
                    "--image-credential-provider-bin-dir".into(),
                    format!("{dir}/bin"),
                ]),
            ),
            (
                "warm",
                s(&[
                    "warm = [{ image = \"registry.k8s.io/pause:3.10\" }, { image = \"busybox:1\", size = \"5Mi\" }]",
                ]),
                None,
            ),
            (
                "warmSetDir",
                vec![format!("warmSetDir = \"{warm_dir}\"")],
                Some(vec!["--warm-set-dir".into(), warm_dir.clone()]),
            ),
            (
                "warmPeriod",
                s(&["warmPeriod = \"10m\""]),
                Some(s(&["--warm-period", "10m"])),
            ),
            ("warmParallelPulls", s(&["warmParallelPulls = 4"]), None),
            (
                "warmFromHistory",
                s(&["warmFromHistory = { usedWithin = \"2h\", maxBytes = \"5Gi\" }"]),
                None,
            ),
        ]
    }

    /// Issue 38: every setting the table declares reaches the same resolved value from its
    /// file key, from `--set key=value` and from its flag where it has one; and each case
    /// changes something from the defaults (a setting no path reaches would pass otherwise).
    #[test]
    fn every_setting_resolves_the_same_from_the_file_set_and_its_flag() {
        let dir = tempfile::tempdir().expect("temp dir");
        let root = dir.path().to_str().expect("utf8");
        std::fs::create_dir(dir.path().join("warm")).expect("warm dir");
        std::fs::write(
            dir.path().join("warm/a.yaml"),
            "warm:\n  - image: registry.k8s.io/pause:3.10\n",
        )
        .expect("warm file");
        let cases = cases(root);
        let covered: Vec<&str> = cases.iter().map(|(key, _, _)| *key).collect();
        let keys: Vec<&str> = CONFIG_FIELDS.iter().map(|f| f.key).collect();
        assert_eq!(
            covered, keys,
            "every declared setting needs its round-trip case"
        );
        let defaults = AgentConfig::defaults().expect("the defaults are valid");
        for (key, lines, flags) in &cases {
            let text = lines.join("\n");
            let file: FileConfig =
                toml::from_str(&text).unwrap_or_else(|e| panic!("{key}: {text}: {e}"));
            let from_file = without_origins(
                AgentConfig::resolve(
                    &file,
                    Some(std::path::Path::new("/f.toml")),
                    &FlagValues::default(),
                )
                .unwrap_or_else(|e| panic!("{key}: {text}: {e}")),
            );
            assert_ne!(from_file, defaults, "{key}: the case changes nothing");
            let mut set_args = Vec::new();
            for line in lines {
                let (k, v) = line.split_once(" = ").expect("key = value");
                // A string is given as plain text: --set needs no TOML quoting for one.
                let v = v
                    .strip_prefix('"')
                    .and_then(|v| v.strip_suffix('"'))
                    .unwrap_or(v);
                set_args.push("--set".to_owned());
                set_args.push(format!("{k}={v}"));
            }
            let set_args: Vec<&str> = set_args.iter().map(String::as_str).collect();
            assert_eq!(resolved(&set_args), from_file, "{key}: --set {set_args:?}");
            let field = CONFIG_FIELDS
                .iter()
                .find(|f| f.key == *key)
                .expect("declared");
            assert_eq!(
                field.flag_name.is_some(),
                flags.is_some(),
                "{key}: the flag"
            );
            if let Some(flags) = flags {
                let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
                assert_eq!(resolved(&flags), from_file, "{key}: {flags:?}");
            }
        }
    }

    /// Issue 53: a reload names every setting whose value changed, where the table says a
    /// reload puts it (swapped in, or waiting for a restart), so SIGHUP never logs
    /// `changed=nothing` for a changed `runtimePins`, `containerdAddress` or `imageGCPolicy`.
    #[test]
    fn a_reload_names_every_changed_setting_where_the_table_says_it_applies() {
        let dir = tempfile::tempdir().expect("temp dir");
        let root = dir.path().to_str().expect("utf8");
        std::fs::create_dir(dir.path().join("warm")).expect("warm dir");
        std::fs::write(
            dir.path().join("warm/a.yaml"),
            "warm:\n  - image: registry.k8s.io/pause:3.10\n",
        )
        .expect("warm file");
        let defaults = AgentConfig::defaults().expect("the defaults are valid");
        for (key, lines, _) in cases(root) {
            let text = lines.join("\n");
            let file: FileConfig =
                toml::from_str(&text).unwrap_or_else(|e| panic!("{key}: {text}: {e}"));
            let changed = AgentConfig::resolve(
                &file,
                Some(std::path::Path::new("/f.toml")),
                &FlagValues::default(),
            )
            .unwrap_or_else(|e| panic!("{key}: {text}: {e}"));
            let report = imagekeeper::agent::ReloadReport::between(&defaults, &changed);
            let field = CONFIG_FIELDS
                .iter()
                .find(|f| f.key == key)
                .expect("a case per declared setting");
            let (named_in, list) = match field.on_reload {
                imagekeeper::config::OnReload::Applied => ("changed", &report.changed),
                imagekeeper::config::OnReload::NeedsRestart => {
                    ("needs_restart", &report.needs_restart)
                }
            };
            assert!(
                list.iter().any(|name| name
                    .split(|c: char| !c.is_ascii_alphanumeric())
                    .any(|word| word == key)),
                "{key} should be named in {named_in}: {report:?}"
            );
        }
    }

    /// Issue 38: every old flag still works (the round trip above) and, when deprecated, says
    /// so once, naming the key that replaces it; a kept flag and `--set` warn nothing.
    #[test]
    fn a_deprecated_flag_still_works_and_warns_naming_its_key() {
        let old = parse(&[
            "--journal-max-age",
            "48h",
            "--pinned-image",
            "a:1",
            "--pinned-image",
            "b:2",
        ])
        .expect("the old flags parse");
        assert_eq!(
            old.deprecations(),
            [
                "warning: --pinned-image is deprecated; use --set pinnedImages=... or the config file key pinnedImages",
                "warning: --journal-max-age is deprecated; use --set journalMaxAge=... or the config file key journalMaxAge",
            ]
        );
        let new = parse(&[
            "--set",
            "journalMaxAge=48h",
            "--set",
            "pinnedImages=[\"a:1\", \"b:2\"]",
        ])
        .expect("--set parses");
        assert!(new.deprecations().is_empty());
        assert_eq!(
            AgentConfig::resolve(&FileConfig::default(), None, &old.values()).expect("valid"),
            AgentConfig::resolve(&FileConfig::default(), None, &new.values()).expect("valid"),
        );
        let kept = parse(&["--image-gc-high-threshold", "90"]).expect("parses");
        assert!(kept.deprecations().is_empty());
        for field in CONFIG_FIELDS {
            if let (Some(name), Some(status)) = (field.flag_name, field.flag_status) {
                let arg = Flags::command()
                    .get_arguments()
                    .find(|a| a.get_long().map(|l| format!("--{l}")).as_deref() == Some(name))
                    .cloned()
                    .unwrap_or_else(|| panic!("{name} is a flag"));
                assert_eq!(
                    arg.is_hide_set(),
                    status == FlagStatus::Deprecated,
                    "{name}"
                );
            }
        }
    }

    /// Issue 38: a flag given wins over `--set`, which wins over the file; the later of two
    /// `--set`s of one key wins.
    #[test]
    fn a_flag_wins_over_set_which_wins_over_the_file() {
        let file: FileConfig =
            toml::from_str("imageGCHighThresholdPercent = 95\njournalMaxEntries = 7")
                .expect("toml");
        let both = parse(&[
            "--set",
            "imageGCHighThresholdPercent=91",
            "--set",
            "imageGCHighThresholdPercent=92",
            "--image-gc-high-threshold",
            "93",
            "--set",
            "journalMaxEntries=8",
        ])
        .expect("parses");
        let c = AgentConfig::resolve(&file, None, &both.values()).expect("valid");
        assert_eq!(c.gc.policy.high_threshold_percent, 93);
        assert_eq!(c.gc.journal_retention.map(|r| r.max_entries), Some(8));
        let set = parse(&[
            "--set",
            "imageGCHighThresholdPercent=91",
            "--set",
            "imageGCHighThresholdPercent=92",
        ])
        .expect("parses");
        let c = AgentConfig::resolve(&file, None, &set.values()).expect("valid");
        assert_eq!(c.gc.policy.high_threshold_percent, 92);
    }

    /// Issue 38: `--set` with an unknown key or a value of the wrong type is a usage error
    /// (exit 2, as a malformed flag) naming the key; a value the resolver refuses names
    /// `--set KEY`.
    #[test]
    fn set_with_an_unknown_key_or_a_bad_value_is_a_usage_error_naming_it() {
        for (arg, says) in [
            ("notAKey=1", "unknown key \"notAKey\""),
            (
                "imageGCHighThresholdPercent=abc",
                "imageGCHighThresholdPercent: \"abc\": invalid type: string \"abc\", expected i64",
            ),
            ("pinnedImages=busybox", "pinnedImages"),
            ("noEquals", "is not KEY=VALUE"),
        ] {
            let err = parse(&["--set", arg]).expect_err(arg);
            assert_eq!(err.kind(), clap::error::ErrorKind::ValueValidation, "{arg}");
            assert_eq!(
                err.exit_code(),
                i32::from(super::super::EXIT_USAGE),
                "{arg}"
            );
            assert!(err.to_string().contains(says), "{arg}: {err}");
        }
        let flags = parse(&["--set", "imageGCHighThresholdPercent=200"]).expect("parses");
        let err = resolve_source(&flags.source(FlagValues::default())).expect_err("refused");
        assert_eq!(err.code, super::super::EXIT_USAGE);
        assert!(
            format!("{:#}", err.error)
                .contains("--set imageGCHighThresholdPercent: invalid configuration: imageGCHighThresholdPercent (--image-gc-high-threshold) 200 must be between 0 and 100, inclusive"),
            "{:#}",
            err.error
        );
    }
}
