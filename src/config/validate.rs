//! Validation across settings: the GC policy's thresholds and ages (the error naming the
//! settings that conflict), the admin socket's path (bindable, and neither the database nor a
//! runtime socket) and a CRI endpoint's form.

use std::path::{Path, PathBuf};

use crate::cri::CriConfig;
use crate::gc::GcPolicy;

use super::origin::invalid;
use super::{ConfigError, MAX_SOCKET_PATH_BYTES};

#[derive(Default)]
pub(super) struct PolicyOrigins {
    pub(super) high: String,
    pub(super) low: String,
    pub(super) min_age: String,
    pub(super) max_age: String,
}

pub(super) fn validate_policy(
    policy: &GcPolicy,
    origins: &PolicyOrigins,
) -> Result<(), ConfigError> {
    let Err(err) = policy.validate() else {
        return Ok(());
    };
    let named = |o: &str, fallback: &str| {
        if o.is_empty() {
            fallback.to_owned()
        } else {
            o.to_owned()
        }
    };
    let high = named(&origins.high, "--image-gc-high-threshold (default)");
    let low = named(&origins.low, "--image-gc-low-threshold (default)");
    let message = err.to_string();
    let origin = if !(0..=100).contains(&policy.high_threshold_percent) {
        high
    } else if !(0..=100).contains(&policy.low_threshold_percent) {
        low
    } else if policy.low_threshold_percent >= policy.high_threshold_percent {
        format!("{low} and {high}")
    } else {
        format!(
            "{} and {}",
            named(&origins.max_age, "--image-maximum-gc-age (default)"),
            named(&origins.min_age, "--minimum-image-ttl-duration (default)")
        )
    };
    Err(invalid(origin, message))
}

/// Refuses an admin socket path that cannot be bound (empty, longer than `sun_path`) or that
/// names the database or a runtime socket: binding there would first remove that file.
pub(super) fn check_admin_socket(
    socket: &Path,
    db: &Path,
    cri: &CriConfig,
) -> Result<(), ConfigError> {
    let origin = || "--admin-socket".to_owned();
    let bytes = socket.as_os_str().len();
    if bytes == 0 {
        return Err(invalid(origin(), "the path is empty"));
    }
    if bytes > MAX_SOCKET_PATH_BYTES {
        return Err(invalid(
            origin(),
            format!(
                "{} is {bytes} bytes long; a unix socket path is at most \
                 {MAX_SOCKET_PATH_BYTES} bytes",
                socket.display()
            ),
        ));
    }
    let socket_id = comparable(socket);
    if socket_id == comparable(db) {
        return Err(invalid(
            origin(),
            format!(
                "{} is the database (--db); the admin socket needs its own path",
                socket.display()
            ),
        ));
    }
    let endpoints = std::iter::once(("--container-runtime-endpoint", &cri.runtime_endpoint)).chain(
        cri.image_endpoint
            .iter()
            .map(|e| ("--image-service-endpoint", e)),
    );
    for (flag, endpoint) in endpoints {
        let path = Path::new(endpoint.strip_prefix("unix://").unwrap_or(endpoint));
        if socket_id == comparable(path) {
            return Err(invalid(
                origin(),
                format!(
                    "{} is the runtime's socket ({flag}); the admin socket needs its own path",
                    socket.display()
                ),
            ));
        }
    }
    Ok(())
}

/// A path made comparable without creating anything: the file's (device, inode) when it
/// exists (so links and `..` compare equal), else its directory resolved plus its name.
#[derive(PartialEq, Eq)]
pub(super) enum Comparable {
    Inode(u64, u64),
    Path(PathBuf),
}

pub(super) fn comparable(path: &Path) -> Comparable {
    use std::os::unix::fs::MetadataExt;
    if let Ok(m) = std::fs::metadata(path) {
        return Comparable::Inode(m.dev(), m.ino());
    }
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_owned());
    let resolved = match (absolute.parent(), absolute.file_name()) {
        (Some(dir), Some(name)) => std::fs::canonicalize(dir)
            .map(|d| d.join(name))
            .unwrap_or_else(|_| absolute.clone()),
        _ => absolute.clone(),
    };
    Comparable::Path(resolved)
}

pub(super) fn check_endpoint(endpoint: &str, origin: &str) -> Result<(), ConfigError> {
    let path = endpoint.strip_prefix("unix://").unwrap_or(endpoint);
    if path.starts_with('/') {
        Ok(())
    } else {
        Err(invalid(
            origin.to_owned(),
            format!("{endpoint:?} is not unix:///path/to/socket or an absolute socket path"),
        ))
    }
}
