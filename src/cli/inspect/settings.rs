//! The GC settings `inspect explain` and `inspect workload` evaluate, resolved as `run`
//! resolves them ([`imagekeeper::config::AgentConfig::resolve`], no second copy of a default):
//! the agent's config file (`--config`), then `--set KEY=VALUE`, then the flags `run` has
//! ([`SettingFlags`]). Their own older flags (`--high`, `--low`, `--min-age`, `--max-age`) keep
//! working as explicit flags for the setting they duplicate, hidden from `--help`, each
//! warning once naming `run`'s flag and the key; one given beside its replacement is a usage
//! error. Invariants: an explicit flag wins over `--set`, which wins over the file, which wins
//! over the default; every error names the flag, key or file the bad value came from (the old
//! flag when that is what was given); every error is a usage error (exit 2).

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use imagekeeper::config::{AgentConfig, ConfigError, FlagValues};
use imagekeeper::format::go_duration;

use super::super::Failure;
use super::super::agent_flags::{SettingFlags, resolve_file_and_flags};
use super::parse_duration;

/// `--config`, `--set`, `run`'s setting flags and the old names of four of them.
#[derive(Args, Debug)]
pub(super) struct GcSettingArgs {
    /// The agent's config file (TOML, KubeletConfiguration's field names: the keys of
    /// docs/src/reference/config.md): its GC settings are evaluated, as `run` reads them;
    /// --set and the flags win over it.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    #[command(flatten)]
    settings: SettingFlags,
    /// Deprecated: --image-gc-high-threshold.
    #[arg(
        long,
        hide = true,
        value_name = "PERCENT",
        allow_negative_numbers = true,
        conflicts_with = "image_gc_high_threshold"
    )]
    high: Option<i64>,
    /// Deprecated: --image-gc-low-threshold.
    #[arg(
        long,
        hide = true,
        value_name = "PERCENT",
        allow_negative_numbers = true,
        conflicts_with = "image_gc_low_threshold"
    )]
    low: Option<i64>,
    /// Deprecated: --minimum-image-ttl-duration.
    #[arg(
        long,
        hide = true,
        value_name = "DURATION",
        value_parser = parse_duration,
        conflicts_with = "minimum_image_ttl_duration"
    )]
    min_age: Option<Duration>,
    /// Deprecated: --image-maximum-gc-age.
    #[arg(
        long,
        hide = true,
        value_name = "DURATION",
        value_parser = parse_duration,
        conflicts_with = "image_maximum_gc_age"
    )]
    max_age: Option<Duration>,
}

/// An old flag of `inspect`, the `run` flag it duplicates and that flag's config key.
struct OldFlag {
    old: &'static str,
    run: &'static str,
    key: &'static str,
    given: bool,
}

impl GcSettingArgs {
    fn old_flags(&self) -> [OldFlag; 4] {
        [
            OldFlag {
                old: "--high",
                run: "--image-gc-high-threshold",
                key: "imageGCHighThresholdPercent",
                given: self.high.is_some(),
            },
            OldFlag {
                old: "--low",
                run: "--image-gc-low-threshold",
                key: "imageGCLowThresholdPercent",
                given: self.low.is_some(),
            },
            OldFlag {
                old: "--min-age",
                run: "--minimum-image-ttl-duration",
                key: "imageMinimumGCAge",
                given: self.min_age.is_some(),
            },
            OldFlag {
                old: "--max-age",
                run: "--image-maximum-gc-age",
                key: "imageMaximumGCAge",
                given: self.max_age.is_some(),
            },
        ]
    }

    /// The flags given, an old flag as the `run` flag it duplicates (clap refuses both).
    fn values(&self) -> FlagValues {
        let mut values = self.settings.values();
        values.image_gc_high_threshold = values.image_gc_high_threshold.or(self.high);
        values.image_gc_low_threshold = values.image_gc_low_threshold.or(self.low);
        values.minimum_image_ttl_duration = values
            .minimum_image_ttl_duration
            .or_else(|| self.min_age.map(go_duration));
        values.image_maximum_gc_age = values
            .image_maximum_gc_age
            .or_else(|| self.max_age.map(go_duration));
        values
    }

    /// The deprecation warnings of the flags given: `run`'s deprecated ones and the old ones.
    fn deprecations(&self) -> Vec<String> {
        let mut lines = self.settings.deprecations();
        for flag in self.old_flags().iter().filter(|f| f.given) {
            lines.push(format!(
                "warning: {} is deprecated; use {} (as `run`), --set {}=... or the config file \
                 key {}",
                flag.old, flag.run, flag.key, flag.key
            ));
        }
        lines
    }

    /// Warns once per deprecated flag given, loads the file (if any) and resolves the
    /// configuration as `run` does; every error is a usage error.
    pub(super) fn resolve(&self) -> Result<AgentConfig, Failure> {
        for line in self.deprecations() {
            eprintln!("{line}");
        }
        resolve_file_and_flags(self.config.as_deref(), &self.values(), |e| {
            self.naming_old_flags(e)
        })
    }

    /// The error with `run`'s flag named as the old flag given in its place.
    fn naming_old_flags(&self, e: ConfigError) -> ConfigError {
        let ConfigError::Invalid { origin, message } = e else {
            return e;
        };
        let old = self.old_flags();
        let origin = origin
            .split(" and ")
            .map(|part| {
                old.iter()
                    .find(|f| f.given && f.run == part)
                    .map_or(part, |f| f.old)
            })
            .collect::<Vec<_>>()
            .join(" and ");
        ConfigError::Invalid { origin, message }
    }
}
