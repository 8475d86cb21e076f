//! The verified snapshot every `inspect` subcommand reads: the file is copied into a private
//! temporary directory under a read transaction on the file (so a writer beside it reuses no
//! page the copy needs), and the copy is opened with redb's integrity check (every page's
//! checksum verified) before anything is read. A copy that does not verify is compared with
//! the file: if the file changed while it was being copied the copy is discarded and taken
//! again (up to [`COPY_ATTEMPTS`] times); if it did not, the file is damaged and refused.
//!
//! Invariants: the inspected path is only ever opened read-only, and only when it is a regular
//! file (a symlink is followed to one; a FIFO, device, socket or directory is refused unopened
//! or, if swapped in meanwhile, after a non-blocking open); nothing is created beside it.

use std::fs;
use std::hash::Hasher;
use std::io::{self, Read, Write};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;
use std::time::Duration;

use super::InspectError;
use crate::store::{Store, StoreError};

/// How many copies are taken before giving up on a file that keeps changing.
pub const COPY_ATTEMPTS: u32 = 5;

/// What kind of non-regular file `file_type` is, for the error.
fn kind_of(file_type: fs::FileType) -> Option<&'static str> {
    if file_type.is_file() {
        None
    } else if file_type.is_fifo() {
        Some("FIFO (named pipe)")
    } else if file_type.is_socket() {
        Some("socket")
    } else if file_type.is_char_device() {
        Some("character device")
    } else if file_type.is_block_device() {
        Some("block device")
    } else if file_type.is_dir() {
        Some("directory")
    } else {
        Some("special file")
    }
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> InspectError + '_ {
    move |source| {
        if source.kind() == io::ErrorKind::NotFound {
            InspectError::Store(StoreError::Missing {
                path: path.to_owned(),
            })
        } else {
            InspectError::Store(StoreError::Io {
                path: path.to_owned(),
                source,
            })
        }
    }
}

/// Opens `path` for reading if it is a regular file (following symlinks). The type is checked
/// before the open, so a FIFO is never opened (which would block) and a device never touched,
/// and again on the open file (non-blocking, no controlling tty), in case the path was swapped.
pub fn open_regular(path: &Path) -> Result<fs::File, InspectError> {
    let refuse = |file_type| match kind_of(file_type) {
        None => Ok(()),
        Some(kind) => Err(InspectError::NotRegular {
            path: path.to_owned(),
            kind,
        }),
    };
    let meta = match fs::metadata(path) {
        Ok(meta) => meta,
        // A loop of symbolic links names no file: bad input, like a FIFO, not a failure.
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Err(InspectError::NotRegular {
                path: path.to_owned(),
                kind: "a loop of symbolic links",
            });
        }
        Err(e) => return Err(io_err(path)(e)),
    };
    refuse(meta.file_type())?;
    let file = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(io_err(path))?;
    refuse(file.metadata().map_err(io_err(path))?.file_type())?;
    Ok(file)
}

/// What tells whether the file changed between two looks: its length and a hash of its first
/// [`HEADER_BYTES`]. redb rewrites its header (a commit slot: the transaction id, the roots and
/// their checksums) at every commit, so a writer's commit always changes the hash; the rest of
/// the file is not hashed (hashing every byte made a copy slow enough, on a loaded machine, for
/// a writer in a GC burst to grow the file faster than it was read).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Fingerprint {
    len: u64,
    hash: u64,
}

/// The start of the file that [`Fingerprint`] hashes; redb's header lies within it.
const HEADER_BYTES: u64 = 64 << 10;

/// Reads up to [`HEADER_BYTES`] from the start of `from` and hashes them.
fn read_header(from: &mut fs::File) -> io::Result<(Vec<u8>, u64)> {
    let mut head = Vec::new();
    from.take(HEADER_BYTES).read_to_end(&mut head)?;
    // SipHash with fixed keys: not a defence against an adversary, only a change detector.
    #[allow(deprecated)]
    let mut hasher = std::hash::SipHasher::new();
    hasher.write(&head);
    Ok((head, hasher.finish()))
}

/// Copies `from` into `to`: the header first, then the rest up to the file's length as it was
/// right after the header was read, never to an end that moves (a writer in a GC burst, its
/// freed pages held by the read pin, grows the file while it is read). The header read names
/// a commit whose pages were written, and the file extended, before it, so they lie within that
/// length.
fn copy_file(from: &mut fs::File, to: &mut fs::File) -> io::Result<Fingerprint> {
    let (head, hash) = read_header(from)?;
    to.write_all(&head)?;
    let head_len = head.len() as u64;
    let end = from.metadata()?.len().max(head_len);
    let rest = io::copy(&mut from.take(end - head_len), to)?;
    Ok(Fingerprint {
        len: head_len + rest,
        hash,
    })
}

/// The file's fingerprint now.
fn fingerprint(from: &mut fs::File) -> io::Result<Fingerprint> {
    let (_, hash) = read_header(from)?;
    Ok(Fingerprint {
        len: from.metadata()?.len(),
        hash,
    })
}

/// A verified copy of the inspected file.
pub struct VerifiedCopy {
    /// A read-write handle on the copy (errors name the inspected file).
    pub store: Store,
    /// The file needed crash recovery: the copy was repaired, the file was not.
    pub needed_recovery: bool,
    /// Copies discarded because the file changed while they were taken.
    pub discarded: u32,
    pub dir: tempfile::TempDir,
}

/// Copies `path` into a new private temporary directory and opens the copy verified, taking
/// it again while the file changes under the copy.
pub fn verified_copy(path: &Path) -> Result<VerifiedCopy, InspectError> {
    verified_copy_with(path, |_, _| {})
}

/// How long one attempt waits for its read pin. redb's read-only open takes the file's header
/// lock shared, waiting (`F_OFD_SETLKW`), while a writer committing back to back (a GC burst)
/// takes it exclusively for every commit: a bound on that wait, so an inspect never waits on a
/// writer for longer. Past it the copy is taken without the pin, and the verification decides,
/// as for a file held exclusively.
pub const PIN_WAIT: Duration = Duration::from_secs(2);

/// Whether the file needed crash recovery, and the read pin when one came within `wait`
/// (`pin` runs on a thread of its own; one that comes later is dropped, and so released, by
/// that thread).
fn pin_within<P: Send + 'static>(
    path: &Path,
    wait: Duration,
    pin: impl FnOnce(fs::File, &Path) -> Result<P, StoreError> + Send + 'static,
) -> Result<(Option<P>, bool), InspectError> {
    let file = open_regular(path)?;
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    let owned = path.to_owned();
    let spawned = std::thread::Builder::new()
        .name("inspect-read-pin".to_owned())
        .spawn(move || {
            let _ = tx.send(pin(file, &owned));
        });
    if spawned.is_err() {
        // No thread for it: copy without the pin (the verification decides).
        return Ok((None, false));
    }
    Ok(match rx.recv_timeout(wait) {
        Ok(Ok(pin)) => (Some(pin), false),
        Ok(Err(StoreError::NeedsRecovery { .. })) => (None, true),
        // Damaged, foreign, held by an exclusive writer, or not pinned within the wait: the
        // verification decides.
        Ok(Err(_)) | Err(_) => (None, false),
    })
}

/// [`verified_copy`], calling `after_copy(attempt, copy)` between taking each copy and opening
/// it: tests tear a copy there, and commit to the file as a writer would.
fn verified_copy_with(
    path: &Path,
    after_copy: impl FnMut(u32, &Path),
) -> Result<VerifiedCopy, InspectError> {
    verified_copy_pinned_by(path, PIN_WAIT, Store::pin_read_only, after_copy)
}

/// [`verified_copy_with`] with the read pin taken by `pin` within `wait` (tests give one that
/// never comes).
fn verified_copy_pinned_by<P: Send + 'static>(
    path: &Path,
    wait: Duration,
    pin: impl Fn(fs::File, &Path) -> Result<P, StoreError> + Send + Sync + Clone + 'static,
    mut after_copy: impl FnMut(u32, &Path),
) -> Result<VerifiedCopy, InspectError> {
    let copy_err = |source| InspectError::Copy {
        path: path.to_owned(),
        source,
    };
    let dir = tempfile::Builder::new()
        .prefix("imagekeeper-inspect-")
        .tempdir()
        .map_err(copy_err)?;
    for attempt in 1..=COPY_ATTEMPTS {
        // The pin's read transaction is held while the copy is taken, no longer: it keeps the
        // writer from reusing pages, so the file grows a little while it lives.
        let (pin, needed_recovery) = pin_within(path, wait, pin.clone())?;
        let copy = dir.path().join(format!("copy-{attempt}.redb"));
        let copied = {
            let mut to = fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&copy)
                .map_err(copy_err)?;
            copy_file(&mut open_regular(path)?, &mut to).map_err(copy_err)?
        };
        drop(pin);
        after_copy(attempt, &copy);
        let opened = Store::open_verified_copy(&copy, path);
        let error = match opened {
            Ok(store) => {
                return Ok(VerifiedCopy {
                    store,
                    needed_recovery,
                    discarded: attempt - 1,
                    dir,
                });
            }
            Err(e) => e,
        };
        let now = fingerprint(&mut open_regular(path)?).map_err(copy_err)?;
        if now == copied {
            // The file holds exactly what was copied: the copy's failure is the file's.
            return Err(error.into());
        }
        let _ = fs::remove_file(&copy);
    }
    Err(InspectError::KeptChanging {
        path: path.to_owned(),
        attempts: COPY_ATTEMPTS,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ImageRecord, RecordKey, UnixNanos};
    use crate::store::Batch;

    fn db(dir: &Path) -> std::path::PathBuf {
        let path = dir.join("records.redb");
        let store = Store::open(&path, UnixNanos::from_secs(1)).expect("open");
        commit(&store, "a");
        path
    }

    fn commit(store: &Store, id: &str) {
        let mut batch = Batch::new();
        batch.upsert(
            RecordKey::new(format!("sha256:{id}"), ""),
            ImageRecord {
                first_detected: UnixNanos::from_secs(1),
                last_used: UnixNanos::NEVER,
                size: 1,
                pinned: false,
            },
        );
        store.apply(&batch).expect("apply");
    }

    /// What a copy torn by a writer looks like to the verification: it does not open.
    fn tear(copy: &Path) {
        fs::write(copy, b"").expect("tear the copy");
    }

    fn ids(copy: &VerifiedCopy) -> Vec<String> {
        let records = copy.store.records().expect("records");
        records.iter().map(|r| r.key.image_id.0.clone()).collect()
    }

    /// A writer committing back to back can starve redb's read-only open of the header lock
    /// (an `inspect export` beside a GC burst waited over 60 s): a pin that does not come
    /// within its wait (here one parked until the test ends) does not hold the copy up.
    #[test]
    fn a_read_pin_that_does_not_come_within_its_wait_does_not_hold_up_the_copy() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = db(dir.path());
        let (release, parked) = std::sync::mpsc::channel::<()>();
        let parked = std::sync::Arc::new(std::sync::Mutex::new(parked));
        let never_pinned = move |_: fs::File, _: &Path| -> Result<(), StoreError> {
            let _ = parked.lock().map(|rx| rx.recv());
            Ok(())
        };
        let copy =
            verified_copy_pinned_by(&path, Duration::from_millis(50), never_pinned, |_, _| {})
                .expect("copied without the pin");
        assert_eq!(ids(&copy), ["sha256:a"]);
        assert_eq!(copy.discarded, 0);
        drop(release);
    }

    #[test]
    fn a_copy_torn_while_the_file_changed_is_taken_again() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = db(dir.path());
        let copy = verified_copy_with(&path, |attempt, copy| {
            if attempt == 1 {
                tear(copy);
                let writer = Store::open(&path, UnixNanos::from_secs(2)).expect("writer");
                commit(&writer, "b");
            }
        })
        .expect("the second copy verifies");
        assert_eq!(copy.discarded, 1);
        assert_eq!(
            ids(&copy),
            ["sha256:a", "sha256:b"],
            "the second copy is read"
        );
        assert!(!copy.needed_recovery);
    }

    #[test]
    fn a_file_that_keeps_changing_is_reported_as_such_not_as_damaged() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = db(dir.path());
        let mut commits = 0;
        let err = verified_copy_with(&path, |attempt, copy| {
            tear(copy);
            let writer = Store::open(&path, UnixNanos::from_secs(2)).expect("writer");
            commit(&writer, &format!("c{attempt}"));
            commits += 1;
        })
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
        assert_eq!(commits, COPY_ATTEMPTS);
        assert!(
            err.contains("changed while it was being copied, on each of 5 attempts")
                && !err.contains("corrupt"),
            "{err}"
        );
    }

    #[test]
    fn a_copy_that_fails_while_the_file_did_not_change_is_the_file_damaged() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = db(dir.path());
        let mut attempts = 0;
        let err = verified_copy_with(&path, |_, copy| {
            attempts += 1;
            tear(copy);
        })
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
        assert_eq!(attempts, 1, "no second copy of an unchanged file");
        let shown = path.display().to_string();
        assert!(
            err.contains(&format!("database {shown} is corrupt")) && err.contains("empty"),
            "{err}"
        );
    }
}
