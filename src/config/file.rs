//! Reading the config file ([`FileConfig`], generated from the settings table in
//! `settings.rs`: KubeletConfiguration's field names, all optional), through the operator-file
//! reader; the values that need their own type are `values.rs`, below the table. Invariants:
//! unknown fields are refused; a reload refuses a file that sets nothing unless it carries
//! [`EMPTY_CONFIG_MARKER`].

use std::path::Path;

use super::{ConfigError, FileConfig};

/// The line that makes a config file setting nothing a deliberate one: a reload refuses a file
/// with no setting (empty, white space, comments only: what an editor truncating the file in
/// place leaves for a moment) unless one of its lines is exactly this (surrounding white space
/// aside). Then every setting goes back to its default, as the file says.
pub(crate) const EMPTY_CONFIG_MARKER: &str = "# imagekeeper: empty";

impl FileConfig {
    /// Reads and parses a TOML file through the operator-file reader
    /// ([`crate::operator_file::read_text`]): a regular file only (a FIFO or device is refused
    /// at once, never waited on), at most [`crate::operator_file::MAX_OPERATOR_FILE_BYTES`],
    /// nested at most [`crate::operator_file::MAX_NESTING_DEPTH`] brackets deep. Blocking I/O.
    pub fn load(path: &Path) -> Result<FileConfig, ConfigError> {
        FileConfig::load_text(path).map(|(config, _)| config)
    }

    /// [`FileConfig::load`] for a reload: a file that sets nothing is refused unless it says
    /// so with [`EMPTY_CONFIG_MARKER`], so that a file caught empty does not silently put
    /// every setting (pinned images among them) back to its default.
    pub(crate) fn load_for_reload(path: &Path) -> Result<FileConfig, ConfigError> {
        let (config, text) = FileConfig::load_text(path)?;
        let sets_nothing = toml::from_str::<toml::Table>(&text).is_ok_and(|t| t.is_empty());
        if sets_nothing && !text.lines().any(|l| l.trim() == EMPTY_CONFIG_MARKER) {
            return Err(ConfigError::File {
                path: path.to_owned(),
                message: format!(
                    "the file sets nothing (it is empty, or holds only comments): refusing to \
                     reset every setting to its default; a file meant to be empty says so with \
                     a line \"{EMPTY_CONFIG_MARKER}\""
                ),
            });
        }
        Ok(config)
    }

    fn load_text(path: &Path) -> Result<(FileConfig, String), ConfigError> {
        use crate::operator_file::{Follow, read_text};
        let text = read_text(path, Follow::Yes).map_err(|e| {
            // The reader's message starts with the path, which ours already names.
            let full = e.to_string();
            let shown = format!("{}: ", e.path().display());
            ConfigError::File {
                path: path.to_owned(),
                message: full.strip_prefix(&shown).unwrap_or(&full).to_owned(),
            }
        })?;
        let config = toml::from_str(&text).map_err(|e| ConfigError::File {
            path: path.to_owned(),
            message: e.to_string().trim_end().to_owned(),
        })?;
        Ok((config, text))
    }
}

#[cfg(test)]
#[path = "file_tests.rs"]
mod tests;
