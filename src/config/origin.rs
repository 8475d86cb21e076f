//! The helpers every area's resolver shares: where a value came from ([`Origin`]), the flag
//! over the file ([`pick`]), and the errors that name it. Below the area modules and
//! `resolve.rs`, which calls them, so that neither imports the other back.

use std::path::Path;
use std::time::Duration;

use crate::format::parse_go_duration;

use super::ConfigError;

/// Where a value came from, for error messages: the file, or `--set` for the keys it gave.
pub(super) struct Origin<'a> {
    pub(super) file: Option<&'a Path>,
    pub(super) set: Vec<&'static str>,
}

impl Origin<'_> {
    /// `field` (`warmPeriod`, `warm[2]`, `warmFromHistory.maxBytes`) named where its value
    /// came from: `--set warmPeriod`, or `warmPeriod in /etc/imagekeeper.toml`.
    pub(super) fn field(&self, field: &str) -> String {
        let key = field.split(['[', '.']).next().unwrap_or(field);
        if self.set.contains(&key) {
            return format!("--set {field}");
        }
        match self.file {
            Some(path) => format!("{field} in {}", path.display()),
            None => field.to_owned(),
        }
    }
}

/// Picks the flag value over the file value, remembering which one won.
pub(super) fn pick<T: Clone>(
    flag: &Option<T>,
    flag_name: &str,
    file: &Option<T>,
    field: String,
) -> Option<(T, String)> {
    match (flag, file) {
        (Some(v), _) => Some((v.clone(), flag_name.to_owned())),
        (None, Some(v)) => Some((v.clone(), field)),
        (None, None) => None,
    }
}

pub(super) fn invalid(origin: String, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        origin,
        message: message.into(),
    }
}

pub(super) fn duration(value: &str, origin: &str) -> Result<Duration, ConfigError> {
    parse_go_duration(value).map_err(|e| invalid(origin.to_owned(), e.to_string()))
}
