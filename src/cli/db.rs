//! Opening the database from a command that runs without an agent (`gc`, `prune`, `pull`):
//! a database another process holds is waited for, a bounded time, before it is refused; a
//! database path that is not a regular file is a usage error (exit 2); a read-only command
//! (a dry run, `pins`) reads a verified copy, as `inspect` does.

use std::path::Path;
use std::time::{Duration, Instant};

use imagekeeper::inspect::{InspectError, Snapshot};
use imagekeeper::model::UnixNanos;
use imagekeeper::store::{Store, StoreError};

use super::Failure;

/// How long a command waits for another process (an agent starting or stopping, another
/// `gc` or `pull`) to release the database.
pub const LOCK_WAIT: Duration = Duration::from_secs(10);
const RETRY_EVERY: Duration = Duration::from_millis(100);

/// The failure for a store error: a path that is not a regular file is bad input (exit 2).
pub fn store_failure(e: StoreError, context: &str) -> Failure {
    let usage = matches!(e, StoreError::NotARegularFile { .. });
    let error = anyhow::Error::new(e).context(context.to_owned());
    Failure {
        code: if usage { 2 } else { 1 },
        error,
    }
}

/// Refuses (exit 2) a database path that names something other than a regular file, before
/// anything is created.
pub fn check_path(path: &Path) -> Result<(), Failure> {
    match Store::check_path(path) {
        Err(e @ StoreError::NotARegularFile { .. }) => Err(store_failure(e, "--db")),
        // Other errors (permissions, ...) are reported by the open itself.
        _ => Ok(()),
    }
}

/// Opens the database read-write, retrying for up to [`LOCK_WAIT`] while another process has
/// it open; says once on stderr that it waits.
pub async fn open_waiting(path: &Path, now: UnixNanos) -> Result<Store, Failure> {
    check_path(path)?;
    let started = Instant::now();
    let mut said = false;
    loop {
        match Store::open(path, now) {
            Err(StoreError::AlreadyOpen { .. }) if started.elapsed() < LOCK_WAIT => {
                if !said {
                    eprintln!(
                        "imagekeeper: database {} is open by another process; waiting up to {}s \
                         for it",
                        path.display(),
                        LOCK_WAIT.as_secs()
                    );
                    said = true;
                }
                tokio::time::sleep(RETRY_EVERY).await;
            }
            Err(e @ StoreError::AlreadyOpen { .. }) => {
                return Err(store_failure(
                    e,
                    &format!("waited {}s for the database", LOCK_WAIT.as_secs()),
                ));
            }
            Err(e) => return Err(store_failure(e, "opening the database")),
            Ok(store) => return Ok(store),
        }
    }
}

/// The store a read-only command reads without an agent: a verified private copy of the
/// database (see [`open_for_dry_run`]), kept while this lives.
pub struct DryRunStore {
    pub store: Store,
    /// The directory holding the copy: removed when dropped.
    pub copy: tempfile::TempDir,
}

/// Opens the database for a read-only command (`gc --dry-run`, `prune --dry-run`, `pins`,
/// `restore --dry-run` without an agent) the way `inspect` reads it (issue 41): a private copy
/// verified page by page (redb's integrity check) before anything is read, so a damaged file is
/// refused with `inspect`'s message, never read into a panic or a wrong answer; a file that
/// needs crash recovery is read through a repaired copy (said on stderr). Nothing is created
/// beside the file (a missing database is an error) and the file is never written.
pub fn open_for_dry_run(path: &Path) -> Result<DryRunStore, Failure> {
    check_path(path)?;
    match Snapshot::open(path) {
        Err(InspectError::Store(e @ StoreError::Missing { .. })) => {
            Err(Failure::from(anyhow::anyhow!(
                "{e}; a dry run creates nothing (run the agent, or the command without \
                 --dry-run, to create it)"
            )))
        }
        Err(e) => Err(super::inspect::inspect_failure(e)),
        Ok(snap) => {
            super::inspect::say_how_it_was_copied(path, &snap, true);
            let (store, copy) = snap.into_store();
            Ok(DryRunStore { store, copy })
        }
    }
}
