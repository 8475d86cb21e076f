//! What the field list is made of: [`ConfigField`] (key, the flag that also sets it, the
//! kubelet's counterpart, its default, what a reload does with it, its help) and [`OnReload`].
//! The list itself, [`super::CONFIG_FIELDS`], is generated from the settings table
//! (`settings.rs`); `scripts/docs` writes the reference page from it.

use super::AgentConfig;

/// Whether a setting's flag stays on `--help` (the kubelet-named and process-level ones) or is
/// deprecated: hidden, still accepted, warning that `--set KEY=VALUE` or the file replaces it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlagStatus {
    /// On `--help`.
    Kept,
    /// Hidden; still accepted, with a warning naming the key.
    Deprecated,
}

impl FlagStatus {
    /// Whether clap hides the flag from `--help`.
    pub const fn hidden(self) -> bool {
        matches!(self, FlagStatus::Deprecated)
    }
}

/// When a changed field takes effect on a reload (SIGHUP or `--config-watch-period`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnReload {
    /// Swapped in between cycles: the next detect or GC runs with it.
    Applied,
    /// Kept at its running value and named in a warning until the next start.
    NeedsRestart,
}

/// One field of the config file, for the reference page `docs/src/reference/config.md`
/// (generated from [`super::CONFIG_FIELDS`] by `scripts/docs`). A unit test checks that the list's
/// keys are exactly the fields [`super::FileConfig`] accepts, so a new field without an entry fails.
#[derive(Debug, Clone, Copy)]
pub struct ConfigField {
    /// The TOML key (KubeletConfiguration's field name where the kubelet has one).
    pub key: &'static str,
    /// The `imagekeeper run` flag that overrides it (a flag wins over the file); `(none)` for
    /// a field no flag sets (`warm`, `warmParallelPulls`, `warmFromHistory`).
    pub flag: &'static str,
    /// The flag that sets it (`--registry-qps`), kept or deprecated; `None` when only the file
    /// and `--set` do.
    pub flag_name: Option<&'static str>,
    /// Whether that flag is on `--help` or deprecated; `None` when there is no flag.
    pub flag_status: Option<FlagStatus>,
    /// The kubelet's setting it matches, or `None` when the field is imagekeeper's own.
    pub kubelet: Option<&'static str>,
    /// The value in force when neither the file nor the flag sets it, read from the
    /// configuration [`AgentConfig::resolve`] makes out of nothing.
    pub default: fn(&AgentConfig) -> String,
    /// What a reload does with a changed value.
    pub on_reload: OnReload,
    /// One paragraph: the reference page's text and the flag's `--help`.
    pub help: &'static str,
}
