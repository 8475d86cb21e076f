//! Opening the database from a command that runs without an agent (`gc`, `prune`, `pull`):
//! a database another process holds is waited for, a bounded time, before it is refused; a
//! database path that is not a regular file is a usage error (exit 2).

use std::path::Path;
use std::time::{Duration, Instant};

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

/// Opens the database read-only for a dry run: nothing is created (a missing database is an
/// error) and nothing is written.
pub fn open_for_dry_run(path: &Path) -> Result<Store, Failure> {
    check_path(path)?;
    match Store::open_read_only(path) {
        Err(e @ StoreError::Missing { .. }) => Err(Failure::from(anyhow::anyhow!(
            "{e}; a dry run creates nothing (run the agent, or the command without --dry-run, \
             to create it)"
        ))),
        Err(e) => Err(store_failure(
            e,
            "opening the database read-only for a dry run",
        )),
        Ok(store) => Ok(store),
    }
}
