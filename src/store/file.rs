//! The database file on disk, before redb opens it: the store acts only on regular files.
//! [`locate`] looks at the path without touching it (a symlink is followed to a regular file
//! and never replaced; a device, FIFO, socket, directory, loop or dangling link is refused as
//! [`StoreError::NotARegularFile`]); the directory is created 0700 and the file 0600 (a looser
//! existing file is set to 0600, with a warning); a non-empty file shorter than redb's header
//! is refused as corrupt. Creation and the read-write open run under an exclusive `flock` on
//! the directory, taken without waiting ([`lock_dir`]: a second process gets
//! [`StoreError::AlreadyOpen`]); under it the `<db>.creating-<pid>-<hex>-<n>` files of dead
//! pids (or of our own pid) are removed, and nothing else. A new database is written under
//! such a temporary name (`O_EXCL`), committed durably, hard-linked into place (replacing only
//! an empty regular file) and its directory synced, so a crash leaves no file (or the empty
//! one that was there) or a complete database. An ENOSPC while creating says so when the
//! inodes ran out.

use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::StoreError;
use super::database::{StoreOptions, open_writable};
use crate::model::UnixNanos;

/// Creates the file's directory (0700) if it does not exist yet.
pub(super) fn prepare_dir(path: &Path) -> Result<(), StoreError> {
    if let Some(dir) = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty() && !d.exists())
    {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|source| StoreError::Io {
                path: path.to_owned(),
                source,
            })?;
    }
    Ok(())
}

/// An exclusive lock on a database's directory, held while a database there is created and
/// opened read-write (released when dropped).
#[derive(Debug)]
pub(super) struct DirLock {
    /// `None` where the directory cannot be locked (see [`lock_dir`]).
    _dir: Option<fs::File>,
}

impl DirLock {
    /// Whether the lock is held (not a directory opened without it).
    pub(super) fn held(&self) -> bool {
        self._dir.is_some()
    }
}

/// Takes the exclusive lock (`flock`) on the directory of `path` without waiting: another
/// process creating or opening a database there holds it, and this open is refused as
/// [`StoreError::AlreadyOpen`] (the commands without an agent retry it for a while). An
/// `flock` is per open file description, so two opens in one process exclude each other too.
/// A directory that cannot be read (mode without `r`) or locked (a file system without
/// `flock`) is opened without the lock, as before it existed, with a warning: redb's own lock
/// on the file still refuses a second read-write handle.
pub(super) fn lock_dir(path: &Path) -> Result<DirLock, StoreError> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let unlocked = |e: io::Error| {
        tracing::warn!(dir = %dir.display(), error = %e, "Cannot lock the database's directory; opening without the lock");
        Ok(DirLock { _dir: None })
    };
    let file = match fs::File::open(dir) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => return unlocked(e),
        Err(source) => {
            return Err(StoreError::Io {
                path: dir.to_owned(),
                source,
            });
        }
    };
    match file.try_lock() {
        Ok(()) => Ok(DirLock { _dir: Some(file) }),
        Err(fs::TryLockError::WouldBlock) => Err(StoreError::AlreadyOpen {
            path: path.to_owned(),
        }),
        Err(fs::TryLockError::Error(e))
            if e.kind() == io::ErrorKind::Unsupported || e.raw_os_error() == Some(libc::ENOLCK) =>
        {
            unlocked(e)
        }
        Err(fs::TryLockError::Error(source)) => Err(StoreError::Io {
            path: dir.to_owned(),
            source,
        }),
    }
}

/// Removes `<db>.creating-<pid>-<hex>-<n>` files (the temporary names of
/// [`create_new_temporary`]) left by processes that died while creating the database or its
/// upgrade backup (a SIGKILL mid-copy leaves a full-size copy). Called with the directory lock
/// held, so no process is creating one now. Only regular files whose whole name is that
/// pattern for this database, and whose pid names no live process (no `/proc/<pid>`) or is
/// this process's own (nothing of ours exists before the lock is taken: a container's pid 1
/// restarted), are removed; anything else is left, and a failure is only logged. Without
/// `/proc` nothing is removed.
pub(super) fn remove_stale_temporaries(path: &Path) {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return;
    };
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    let proc_root = Path::new("/proc");
    if !proc_root.join("self").exists() {
        return;
    }
    let Some(prefix) = name.to_str().map(|n| format!("{n}.creating-")) else {
        return;
    };
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    let own = std::process::id();
    for entry in entries.flatten() {
        let file_name = entry.file_name();
        let Some(pid) = file_name
            .to_str()
            .and_then(|n| n.strip_prefix(&prefix))
            .and_then(temporary_pid)
        else {
            continue;
        };
        if pid != own && proc_root.join(pid.to_string()).exists() {
            continue;
        }
        let stale = dir.join(&file_name);
        if !fs::symlink_metadata(&stale).is_ok_and(|m| m.is_file()) {
            continue;
        }
        match fs::remove_file(&stale) {
            Ok(()) => {
                tracing::info!(path = %stale.display(), pid, "Removed a temporary database file a dead process left")
            }
            Err(e) => {
                tracing::warn!(path = %stale.display(), error = %e, "Cannot remove a temporary database file a dead process left")
            }
        }
    }
}

/// The pid of a temporary name's rest after `<db>.creating-`: `<pid>-<hex>-<n>`, exactly.
fn temporary_pid(rest: &str) -> Option<u32> {
    let mut parts = rest.split('-');
    let (pid, random, n) = (parts.next()?, parts.next()?, parts.next()?);
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let hex = !random.is_empty() && random.bytes().all(|b| b.is_ascii_hexdigit());
    if parts.next().is_some() || !digits(pid) || !hex || !digits(n) {
        return None;
    }
    pid.parse().ok()
}

/// The regular file a database path names.
pub(super) struct Found {
    /// The path itself, or the target of a symlink (fully resolved).
    pub(super) real: PathBuf,
    pub(super) len: u64,
}

/// What is at `path`, without touching it: `None` when nothing is there; the regular file it
/// names (following symlinks) otherwise. Anything else (a device node, a FIFO, a socket, a
/// directory, a symlink to one of those or to nothing) is refused as
/// [`StoreError::NotARegularFile`], naming what it is: the store creates, replaces and
/// truncates only regular files.
pub(super) fn locate(path: &Path) -> Result<Option<Found>, StoreError> {
    let io_err = |source| StoreError::Io {
        path: path.to_owned(),
        source,
    };
    // A loop of symbolic links (at the path or in its directories) is bad input, not a
    // failure: refused like any path that names no regular file.
    let symlink_loop = || StoreError::NotARegularFile {
        path: path.to_owned(),
        kind: "a loop of symbolic links".to_owned(),
    };
    let link = match fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => return Err(symlink_loop()),
        Err(e) => return Err(io_err(e)),
    };
    if link.file_type().is_symlink() {
        let target = match fs::metadata(path) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(StoreError::NotARegularFile {
                    path: path.to_owned(),
                    kind: "a symbolic link to a file that does not exist".to_owned(),
                });
            }
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => return Err(symlink_loop()),
            Err(e) => return Err(io_err(e)),
        };
        if !target.is_file() {
            return Err(StoreError::NotARegularFile {
                path: path.to_owned(),
                kind: format!("a symbolic link to {}", file_kind(&target.file_type())),
            });
        }
        let real = fs::canonicalize(path).map_err(io_err)?;
        return Ok(Some(Found {
            real,
            len: target.len(),
        }));
    }
    if !link.is_file() {
        return Err(StoreError::NotARegularFile {
            path: path.to_owned(),
            kind: file_kind(&link.file_type()),
        });
    }
    Ok(Some(Found {
        real: path.to_owned(),
        len: link.len(),
    }))
}

/// What a file type is, for messages: "a FIFO (named pipe)", "a character device", ...
fn file_kind(t: &fs::FileType) -> String {
    use std::os::unix::fs::FileTypeExt;
    let kind = if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO (named pipe)"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_symlink() {
        "a symbolic link"
    } else if t.is_file() {
        "a regular file"
    } else {
        "not a regular file"
    };
    kind.to_owned()
}

/// Whether `path` is an empty regular file (not a symlink, not a device, not a FIFO).
fn is_empty_regular_file(path: &Path) -> Result<bool, StoreError> {
    match fs::symlink_metadata(path) {
        Ok(m) => Ok(m.is_file() && m.len() == 0),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(StoreError::Io {
            path: path.to_owned(),
            source: e,
        }),
    }
}

/// Creates a new database so that a crash at any moment leaves either no file (or the empty
/// one that was there) or a complete, initialized one: the file is written and committed
/// durably under a temporary name, linked into place (never replacing a file another process
/// created meanwhile), and the directory is synced. A power cut while redb initializes a file
/// in place can leave one it refuses, and the store never wipes files.
pub(super) fn create_durably(path: &Path, now: UnixNanos) -> Result<(), StoreError> {
    // Creating files: an ENOSPC here may be the inodes running out (said as such).
    let io_err = |p: &Path| {
        let p = p.to_owned();
        move |source| StoreError::creating(&p, source, free_inodes)
    };
    // A name no other process uses: never removed before it is ours (two agents in two
    // containers can share a pid, 1, and a hostPath directory during a rolling update).
    let tmp = create_new_temporary(path).map_err(io_err(path))?;
    let created = (|| {
        let store = open_writable(&tmp, StoreOptions::default())?;
        store.initialize(now)?;
        drop(store);
        // Only an empty regular file is replaced (a crash between creating a file and redb
        // writing its header leaves one); `path` was resolved by `locate`, and is checked
        // again here because the directory may have changed since.
        if is_empty_regular_file(path)? {
            fs::remove_file(path).map_err(io_err(path))?;
        }
        match fs::hard_link(&tmp, path) {
            Ok(()) => {}
            // Another process created it first: use theirs.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(io_err(path)(e)),
        }
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            fs::File::open(dir)
                .and_then(|d| d.sync_all())
                .map_err(io_err(dir))?;
        }
        Ok(())
    })();
    let _ = fs::remove_file(&tmp);
    created
}

/// Creates `<db>.creating-<pid>-<random>-<n>` (0600) next to `path` with `O_EXCL`, trying
/// another name while one exists; returns its path. Nothing is removed to make room.
/// The inodes an unprivileged process may still create on `dir`'s filesystem (statvfs's
/// `f_favail`); `None` when statvfs fails or the filesystem does not count them (0 files).
pub(super) fn free_inodes(dir: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: a zeroed statvfs is a valid value of this plain C struct.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: statvfs writes one struct into `st`, which we own; `c` is NUL-terminated.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 || st.f_files == 0 {
        return None;
    }
    Some(st.f_favail)
}

pub(super) fn create_new_temporary(path: &Path) -> io::Result<PathBuf> {
    use std::hash::{BuildHasher, Hasher};
    // std's per-process random hash keys: a random number without a clock or a crate.
    let random = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    for n in 0..64u32 {
        let mut name = path.file_name().unwrap_or_default().to_owned();
        name.push(format!(".creating-{}-{random:x}-{n}", std::process::id()));
        let tmp = path.with_file_name(name);
        match fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)
        {
            Ok(_) => return Ok(tmp),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AlreadyExists,
        "no free temporary name to create the database under",
    ))
}

/// Creates the file (0600) if it does not exist yet, tightens an existing file's mode to 0600
/// (logging once when it was looser), and refuses a non-empty file too short to be a database
/// or anything but a regular file. Returns the file's length.
pub(super) fn prepare_file(path: &Path) -> Result<u64, StoreError> {
    let io_err = |source| StoreError::Io {
        path: path.to_owned(),
        source,
    };
    let file = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        // `path` is already resolved: a symlink here now was put there meanwhile.
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| open_io_error(path, e))?;
    let meta = file.metadata().map_err(io_err)?;
    if !meta.is_file() {
        return Err(StoreError::NotARegularFile {
            path: path.to_owned(),
            kind: file_kind(&meta.file_type()),
        });
    }
    let mode = meta.permissions().mode() & 0o7777;
    if meta.len() == 0 || mode & 0o7077 != 0 {
        if meta.len() > 0 {
            tracing::warn!(
                path = %path.display(),
                mode = format!("{mode:04o}"),
                "the database file was readable or writable by others; its mode is now 0600"
            );
        }
        // A file we just created (whatever the umask), or an existing looser one.
        file.set_permissions(fs::Permissions::from_mode(0o600))
            .map_err(io_err)?;
    }
    check_not_empty_or_plausible(path, meta.len())?;
    Ok(meta.len())
}

/// redb's header is one page; anything shorter but non-empty is a truncated or foreign file.
const MIN_DATABASE_BYTES: u64 = 512;

fn check_not_empty_or_plausible(path: &Path, len: u64) -> Result<(), StoreError> {
    if len > 0 && len < MIN_DATABASE_BYTES {
        return Err(StoreError::Corrupt {
            path: path.to_owned(),
            detail: format!("the file is only {len} bytes long (truncated, or not a database)"),
            source: None,
        });
    }
    Ok(())
}

pub(super) fn check_not_empty(path: &Path, file: &fs::File) -> Result<(), StoreError> {
    let len = file
        .metadata()
        .map_err(|e| StoreError::Io {
            path: path.to_owned(),
            source: e,
        })?
        .len();
    if len == 0 {
        return Err(StoreError::Corrupt {
            path: path.to_owned(),
            detail: "the file is empty".to_owned(),
            source: None,
        });
    }
    check_not_empty_or_plausible(path, len)
}

pub(super) fn open_io_error(path: &Path, e: io::Error) -> StoreError {
    if e.kind() == io::ErrorKind::NotFound {
        StoreError::Missing {
            path: path.to_owned(),
        }
    } else {
        StoreError::Io {
            path: path.to_owned(),
            source: e,
        }
    }
}
