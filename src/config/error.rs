//! The configuration's one error type: a bad setting named by the flag or file field that
//! holds it, a config file that cannot be read or parsed, or pull settings that break the
//! kubelet's validation. Invariant: every message names where the bad value came from.

use std::path::PathBuf;

use crate::pull::PullConfigError;

/// A bad setting: `origin` is the flag (`--registry-qps`) or the file field
/// (`registryPullQPS in /etc/imagekeeper.toml`).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A setting's value is refused.
    #[error("{origin}: {message}")]
    Invalid {
        /// The flag or file field that holds it.
        origin: String,
        /// What is wrong with it.
        message: String,
    },
    /// The config file cannot be read or parsed (unknown keys included).
    #[error("config file {path}: {message}")]
    File {
        /// The file.
        path: PathBuf,
        /// The reader's or the TOML parser's message.
        message: String,
    },
    /// The pull settings break kubelet's validation; `origin` is the flag or field set last
    /// (`pull settings` when none was set).
    #[error("{origin}: {source}")]
    Pull {
        /// The flag or field set last.
        origin: String,
        /// The kubelet's validation error.
        #[source]
        source: PullConfigError,
    },
}

impl From<PullConfigError> for ConfigError {
    /// Pull settings that did not come through [`AgentConfig::resolve`](super::AgentConfig::resolve)'s flags or file.
    fn from(source: PullConfigError) -> ConfigError {
        ConfigError::Pull {
            origin: "pull settings".to_owned(),
            source,
        }
    }
}

impl ConfigError {
    /// The message on one line, for a log line or a status: the TOML parser's source excerpt
    /// (the `|` lines) is left out, its position and message kept.
    pub fn one_line(&self) -> String {
        let text = self.to_string();
        let mut parts = text.lines().map(str::trim).filter(|line| {
            let excerpt = line.starts_with('|')
                || line
                    .split_once(" |")
                    .is_some_and(|(n, _)| n.chars().all(|c| c.is_ascii_digit()));
            !line.is_empty() && !excerpt
        });
        let mut out = parts.next().unwrap_or_default().to_owned();
        for part in parts {
            out.push_str(": ");
            out.push_str(part);
        }
        out
    }
}
