//! Reading the files an operator hands the agent: the config file, pull secrets, node
//! credentials (`config.json`), credential provider configs, warm-set files, the kubelet's
//! config and its pull records. One reader for all of them, so none can hang, starve or
//! exhaust the agent:
//!
//! - the file is opened with `O_NONBLOCK` (a FIFO opens at once instead of waiting for a
//!   writer) and judged by the handle that was opened (`fstat`), so a file swapped in between
//!   the check and the read is never read: only a regular file is read;
//! - at most [`MAX_OPERATOR_FILE_BYTES`] (1 MiB, a ConfigMap's limit) are read, whatever the
//!   file says its size is (a device or a growing file cannot make it read more);
//! - [`Follow::No`] refuses a symlink at the last component (`O_NOFOLLOW`), for files found
//!   under a directory the reader must not leave (the kubelet's pull records);
//! - text is checked for UTF-8 and for nesting deeper than [`MAX_NESTING_DEPTH`] brackets
//!   before a YAML, JSON or TOML parser sees it ([`check_nesting`]), so a small document
//!   100,000 levels deep is refused in microseconds, not after seconds of parsing;
//! - [`read_async`] runs the read on tokio's blocking pool, never on an async worker. (The
//!   kubelet's pull records are the exception: the GC's detect reads them on its own task,
//!   each file through this reader, so no read there can hang or be unbounded, though a slow
//!   disk under the kubelet's root delays that task.)
//!
//! Invariants: no function here blocks on anything but a regular file's read; none allocates
//! more than `MAX_OPERATOR_FILE_BYTES + 1` bytes for the content.

use std::fs::OpenOptions;
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

mod document;

pub use document::{DocumentError, YAML_OR_JSON, parse_yaml_or_json};

/// The most bytes read of any operator file: 1 MiB, the size limit of a Kubernetes ConfigMap
/// or Secret, far above any real config, secret or provider config.
pub const MAX_OPERATOR_FILE_BYTES: u64 = 1 << 20;

/// The deepest nesting of `[`/`{` accepted in an operator file's text. Real configs nest a
/// handful of levels; serde's own recursion limit is 128.
pub const MAX_NESTING_DEPTH: usize = 64;

/// Whether a symlink at the path's last component is followed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Follow {
    /// Follow symlinks, as for a file the operator names on the command line.
    Yes,
    /// Refuse a symlink at the last component (`O_NOFOLLOW`): the file is reported as
    /// [`OperatorFileError::NotRegular`].
    No,
}

/// Why an operator file was not read. Every variant names the file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OperatorFileError {
    /// The file does not exist (kept apart so optional files can be skipped quietly).
    #[error("{path}: no such file")]
    NotFound {
        /// The file.
        path: PathBuf,
    },
    /// Opening or reading failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// Not a regular file: a FIFO, socket, device, directory, or (with [`Follow::No`]) a
    /// symlink.
    #[error("{path}: not a regular file ({kind})")]
    NotRegular {
        /// The file.
        path: PathBuf,
        /// What it is instead.
        kind: &'static str,
    },
    /// Larger than [`MAX_OPERATOR_FILE_BYTES`].
    #[error("{path}: the file is larger than {limit} bytes (at least {size} bytes)")]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// The size seen (the stat size, or the bytes read when that was larger).
        size: u64,
        /// The limit.
        limit: u64,
    },
    /// Not UTF-8 text (only from [`read_text`]).
    #[error("{path}: the file is not UTF-8 text")]
    NotText {
        /// The file.
        path: PathBuf,
    },
    /// Nested deeper than [`MAX_NESTING_DEPTH`] (only from [`read_text`]).
    #[error("{path}: {source}")]
    TooDeep {
        /// The file.
        path: PathBuf,
        /// Where the limit was passed.
        #[source]
        source: NestingTooDeep,
    },
    /// The blocking read's task could not be joined (the runtime is shutting down).
    #[error("{path}: the read did not complete: {message}")]
    Join {
        /// The file.
        path: PathBuf,
        /// The join error's text.
        message: String,
    },
}

impl OperatorFileError {
    /// The file the error is about.
    pub fn path(&self) -> &Path {
        match self {
            OperatorFileError::NotFound { path }
            | OperatorFileError::Io { path, .. }
            | OperatorFileError::NotRegular { path, .. }
            | OperatorFileError::TooLarge { path, .. }
            | OperatorFileError::NotText { path }
            | OperatorFileError::TooDeep { path, .. }
            | OperatorFileError::Join { path, .. } => path,
        }
    }

    /// Whether the file simply does not exist.
    pub fn is_not_found(&self) -> bool {
        matches!(self, OperatorFileError::NotFound { .. })
    }
}

/// Text nested deeper than [`MAX_NESTING_DEPTH`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("nested more than {limit} levels deep at line {line}")]
pub struct NestingTooDeep {
    /// The 1-based line where the limit was passed.
    pub line: usize,
    /// The limit.
    pub limit: usize,
}

/// Reads the regular file at `path`: at most [`MAX_OPERATOR_FILE_BYTES`], never blocking on a
/// FIFO or device. Blocking I/O: from async code use [`read_async`].
pub fn read_bytes(path: &Path, follow: Follow) -> Result<Vec<u8>, OperatorFileError> {
    read_bytes_limited(path, follow, MAX_OPERATOR_FILE_BYTES)
}

/// [`read_bytes`] with another cap (tests, and readers with a smaller one).
pub fn read_bytes_limited(
    path: &Path,
    follow: Follow,
    limit: u64,
) -> Result<Vec<u8>, OperatorFileError> {
    let owned = || path.to_path_buf();
    let (file, metadata) = open_regular_with_metadata(path, follow)?;
    if metadata.len() > limit {
        return Err(OperatorFileError::TooLarge {
            path: owned(),
            size: metadata.len(),
            limit,
        });
    }
    let capacity = usize::try_from(metadata.len()).unwrap_or(0);
    let mut bytes = Vec::with_capacity(capacity);
    file.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|source| OperatorFileError::Io {
            path: owned(),
            source,
        })?;
    if bytes.len() as u64 > limit {
        return Err(OperatorFileError::TooLarge {
            path: owned(),
            size: bytes.len() as u64,
            limit,
        });
    }
    Ok(bytes)
}

/// The regular file at `path`, opened and checked as [`read_bytes`] does, for a reader that
/// bounds what it reads itself (a workload read a line at a time, each line capped).
pub fn open_regular(path: &Path, follow: Follow) -> Result<std::fs::File, OperatorFileError> {
    open_regular_with_metadata(path, follow).map(|(file, _)| file)
}

fn open_regular_with_metadata(
    path: &Path,
    follow: Follow,
) -> Result<(std::fs::File, std::fs::Metadata), OperatorFileError> {
    let owned = || path.to_path_buf();
    let mut flags = libc::O_NONBLOCK | libc::O_CLOEXEC;
    if follow == Follow::No {
        flags |= libc::O_NOFOLLOW;
    }
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(flags)
        .open(path)
        .map_err(|source| match source.raw_os_error() {
            Some(libc::ENOENT) => OperatorFileError::NotFound { path: owned() },
            Some(libc::ELOOP) if follow == Follow::No => OperatorFileError::NotRegular {
                path: owned(),
                kind: "a symlink",
            },
            Some(libc::ELOOP) => OperatorFileError::Io {
                path: owned(),
                source: std::io::Error::other("too many levels of symbolic links"),
            },
            // open(2) of a unix socket fails with ENXIO (a FIFO opens at once: O_NONBLOCK).
            Some(libc::ENXIO) => OperatorFileError::NotRegular {
                path: owned(),
                kind: "a socket",
            },
            _ => OperatorFileError::Io {
                path: owned(),
                source,
            },
        })?;
    let metadata = file.metadata().map_err(|source| OperatorFileError::Io {
        path: owned(),
        source,
    })?;
    let file_type = metadata.file_type();
    if !file_type.is_file() {
        return Err(OperatorFileError::NotRegular {
            path: owned(),
            kind: describe(&file_type),
        });
    }
    Ok((file, metadata))
}

/// [`read_bytes`], then UTF-8 and nesting checks: what a YAML, JSON or TOML parser may be
/// given.
pub fn read_text(path: &Path, follow: Follow) -> Result<String, OperatorFileError> {
    let bytes = read_bytes(path, follow)?;
    let text = String::from_utf8(bytes).map_err(|_| OperatorFileError::NotText {
        path: path.to_path_buf(),
    })?;
    check_nesting(&text).map_err(|source| OperatorFileError::TooDeep {
        path: path.to_path_buf(),
        source,
    })?;
    Ok(text)
}

/// [`read_bytes`] on tokio's blocking pool, so no async worker ever waits on a file.
pub async fn read_async(path: PathBuf, follow: Follow) -> Result<Vec<u8>, OperatorFileError> {
    let shown = path.clone();
    tokio::task::spawn_blocking(move || read_bytes(&path, follow))
        .await
        .map_err(|e| OperatorFileError::Join {
            path: shown,
            message: e.to_string(),
        })?
}

/// [`read_text`] on tokio's blocking pool.
pub async fn read_text_async(path: PathBuf, follow: Follow) -> Result<String, OperatorFileError> {
    let shown = path.clone();
    tokio::task::spawn_blocking(move || read_text(&path, follow))
        .await
        .map_err(|e| OperatorFileError::Join {
            path: shown,
            message: e.to_string(),
        })?
}

/// Refuses text whose `[`/`{` nesting goes deeper than [`MAX_NESTING_DEPTH`], counted outside
/// quoted strings (`"…"` with backslash escapes, `'…'`, opened only where a value may start)
/// and `#` comments. Conservative for YAML
/// and TOML (a bracket in a plain scalar counts), which is what a pre-parse bound needs: no
/// real operator file comes near the limit. Linear in the text, no allocation.
pub fn check_nesting(text: &str) -> Result<(), NestingTooDeep> {
    check_nesting_limited(text, MAX_NESTING_DEPTH)
}

/// [`check_nesting`] with another limit.
pub fn check_nesting_limited(text: &str, limit: usize) -> Result<(), NestingTooDeep> {
    #[derive(Clone, Copy, PartialEq)]
    enum State {
        Plain,
        Double,
        DoubleEscape,
        Single,
        Comment,
    }
    let mut state = State::Plain;
    let mut depth = 0usize;
    let mut line = 1usize;
    // A '#' starts a comment only at the start of a line or after white space (YAML's rule;
    // TOML's is looser, which only makes this count more, never less).
    let mut after_space = true;
    // Whether a value may start here: a quote there opens a string (JSON, TOML and YAML put
    // strings after white space, `[`, `{`, `,`, `:`, `=`, `-` or `?`).
    let mut value_start = true;
    for byte in text.bytes() {
        if byte == b'\n' {
            line += 1;
            if state == State::Comment {
                state = State::Plain;
            }
        }
        state = match state {
            State::Comment => State::Comment,
            State::DoubleEscape => State::Double,
            State::Double => match byte {
                b'\\' => State::DoubleEscape,
                b'"' | b'\n' => State::Plain,
                _ => State::Double,
            },
            State::Single => match byte {
                b'\'' | b'\n' => State::Plain,
                _ => State::Single,
            },
            State::Plain => match byte {
                // A quote opens a string only where a value starts (YAML's rule: `b'c` is a
                // plain scalar with a quote in it, and what follows it still counts).
                b'"' if value_start => State::Double,
                b'\'' if value_start => State::Single,
                b'#' if after_space => State::Comment,
                b'[' | b'{' => {
                    depth += 1;
                    if depth > limit {
                        return Err(NestingTooDeep { line, limit });
                    }
                    State::Plain
                }
                b']' | b'}' => {
                    depth = depth.saturating_sub(1);
                    State::Plain
                }
                _ => State::Plain,
            },
        };
        after_space = matches!(byte, b' ' | b'\t' | b'\n' | b'\r' | b'[' | b'{' | b',');
        value_start = after_space || matches!(byte, b':' | b'=' | b'-' | b'?');
    }
    Ok(())
}

fn describe(file_type: &std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if file_type.is_dir() {
        "a directory"
    } else if file_type.is_fifo() {
        "a FIFO"
    } else if file_type.is_socket() {
        "a socket"
    } else if file_type.is_char_device() {
        "a character device"
    } else if file_type.is_block_device() {
        "a block device"
    } else if file_type.is_symlink() {
        "a symlink"
    } else {
        "not a regular file"
    }
}

#[cfg(test)]
mod tests;
