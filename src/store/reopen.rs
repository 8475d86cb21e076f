//! Recovering from I/O failures without a restart.
//!
//! After an I/O error (a full disk, EIO) redb latches its handle: every later call fails with
//! "Previous I/O error occurred. Please close and re-open the database", even once the disk
//! has room again. Invariants: an I/O failure marks the store unhealthy; an unhealthy store
//! reopens before its next call (the failed redb handle is dropped, then the same file is
//! opened again with the checks of `Store::open`, never created, rewritten or wiped); a call
//! that meets redb's latched error reopens and runs once more (every batch operation sets a
//! value, so a second run of a batch is harmless); a reopen waits for every call in flight on
//! the old handle, so no transaction spans two handles. Read-only handles are never reopened.
//!
//! Lazy scans ([`RecordScan`](super::RecordScan), [`EvictionIter`](super::EvictionIter)) keep a
//! read transaction between calls, outside the handle lock, so a reopen cannot wait for them.
//! Instead every reopen bumps the handle generation (under its write lock, before the old
//! handle is dropped), and a scan reads only under that lock's read side and only while the
//! generation is the one its transaction began in; otherwise it fails with
//! [`StoreError::Reopened`]. Closing a handle releases the reader lock that kept its
//! snapshot's pages, so a scan that read on would see pages the new handle may have reused.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use super::{Handle, Source, Store, StoreError, open};

/// What a store shares with its lazy scans.
pub(super) struct Liveness {
    /// False from an I/O failure until a reopen succeeds.
    pub(super) healthy: AtomicBool,
    /// How many times the handle was replaced; see the module doc.
    pub(super) generation: RwLock<u64>,
    /// Whether the store reopens after an I/O failure (not a fixed handle).
    pub(super) reopenable: bool,
}

impl Liveness {
    fn mark_unhealthy(&self, path: &Path, cause: &StoreError) {
        if self.healthy.swap(false, Ordering::SeqCst) {
            tracing::error!(
                path = %path.display(),
                error = %cause,
                "The database failed an I/O operation: not ready until it is reopened, which the next use of it tries"
            );
        }
    }
}

/// A lazy scan's tie to the handle its read transaction began on.
pub(super) struct ScanTie {
    liveness: Arc<Liveness>,
    generation: u64,
    path: PathBuf,
}

impl ScanTie {
    /// Runs `step`, one read from the scan's transaction, if that transaction's handle is
    /// still the store's, holding off any reopen while it runs; fails with
    /// [`StoreError::Reopened`] otherwise. An I/O failure it meets marks the store unhealthy,
    /// as a guarded call does, so the next call reopens.
    pub(super) fn step<T>(
        &self,
        step: impl FnOnce() -> Option<Result<T, StoreError>>,
    ) -> Option<Result<T, StoreError>> {
        let generation = self
            .liveness
            .generation
            .read()
            .unwrap_or_else(|p| p.into_inner());
        if *generation != self.generation {
            return Some(Err(StoreError::Reopened {
                path: self.path.clone(),
            }));
        }
        let out = step();
        if let Some(Err(e)) = &out
            && e.is_io_failure()
            && self.liveness.reopenable
        {
            self.liveness.mark_unhealthy(&self.path, e);
        }
        out
    }
}

impl Store {
    /// Whether the store is usable: false from an I/O failure (such as a full disk) until the
    /// store has reopened its file. The agent reports this as readiness
    /// (`imagekeeper_store_healthy`, `/readyz`).
    pub fn is_healthy(&self) -> bool {
        self.liveness.healthy.load(Ordering::SeqCst)
    }

    /// How many times the store reopened its file after an I/O failure.
    pub fn reopens(&self) -> u64 {
        self.reopens.load(Ordering::SeqCst)
    }

    /// Runs `op`, the body of a public call, recovering from I/O failures: an unhealthy store
    /// reopens first; an I/O error marks it unhealthy; redb's "previous I/O error" (the handle
    /// failed earlier, unseen by this call) reopens and runs `op` once more.
    pub(super) fn guarded<T>(
        &self,
        op: impl Fn() -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        if !self.is_healthy() {
            self.reopen()?;
        }
        match op() {
            Err(e) if e.is_previous_io() && self.reopenable() => {
                self.mark_unhealthy(&e);
                self.reopen()?;
                let retried = op();
                if let Err(e) = &retried
                    && e.is_io_failure()
                {
                    self.mark_unhealthy(e);
                }
                retried
            }
            Err(e) => {
                if e.is_io_failure() && self.reopenable() {
                    self.mark_unhealthy(&e);
                }
                Err(e)
            }
            ok => ok,
        }
    }

    fn mark_unhealthy(&self, cause: &StoreError) {
        self.liveness.mark_unhealthy(&self.path, cause);
    }

    fn reopenable(&self) -> bool {
        self.liveness.reopenable
    }

    /// A read transaction and the tie of a lazy scan over it: the generation is read under
    /// the handle lock, so it is the generation of the handle the transaction began on.
    pub(super) fn begin_scan(&self) -> Result<(redb::ReadTransaction, ScanTie), StoreError> {
        let handle = self.read_handle();
        let generation = *self
            .liveness
            .generation
            .read()
            .unwrap_or_else(|p| p.into_inner());
        let txn = self.begin_read_on(&handle)?;
        let tie = ScanTie {
            liveness: Arc::clone(&self.liveness),
            generation,
            path: self.path.clone(),
        };
        Ok((txn, tie))
    }

    /// Replaces a failed redb handle by a fresh open of the same file (or disk), with the
    /// checks of [`Store::open`]. The failed handle is dropped first: redb locks the file per
    /// handle, and closing a failed handle writes nothing.
    fn reopen(&self) -> Result<(), StoreError> {
        let mut handle = self.handle.write().unwrap_or_else(|p| p.into_inner());
        if self.is_healthy() {
            // Another call reopened it while this one waited.
            return Ok(());
        }
        if !self.reopenable() {
            // Not reached: a fixed handle is never marked unhealthy. Keep it as it is.
            return Err(StoreError::Closed {
                path: self.path.clone(),
            });
        }
        self.forget_journal_keys();
        self.forget_history_mirror();
        // Before the old handle goes: from here no scan on it reads again (see the module doc).
        *self
            .liveness
            .generation
            .write()
            .unwrap_or_else(|p| p.into_inner()) += 1;
        *handle = Handle::Closed;
        let fresh = match &self.source {
            // Refused above.
            Source::Fixed => Err(StoreError::Closed {
                path: self.path.clone(),
            }),
            Source::File => open::reopen_file(&self.path, self.options),
            #[cfg(any(test, feature = "fault-injection"))]
            Source::Disk { disk, mode } => open::reopen_disk(disk, &self.path, *mode),
        };
        match fresh {
            Ok(fresh) => {
                *handle = fresh;
                self.liveness.healthy.store(true, Ordering::SeqCst);
                self.reopens.fetch_add(1, Ordering::SeqCst);
                tracing::info!(path = %self.path.display(), "Reopened the database after an I/O failure");
                Ok(())
            }
            Err(e) => {
                tracing::warn!(path = %self.path.display(), error = %e, "Cannot reopen the database after an I/O failure; retrying at the next use");
                Err(e)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::sync::atomic::Ordering;

    use crate::model::{ImageRecord, RecordKey, UnixNanos};
    use crate::store::power_loss::PowerLossDisk;
    use crate::store::{Batch, CommitMode, Store, StoreError};

    fn upsert(id: &str, last_used_secs: i64) -> Batch {
        let mut batch = Batch::new();
        batch.upsert(
            RecordKey::new(id, ""),
            ImageRecord {
                first_detected: UnixNanos::from_secs(1),
                last_used: UnixNanos::from_secs(last_used_secs),
                size: 100,
                pinned: false,
            },
        );
        batch
    }

    fn open(disk: &PowerLossDisk) -> Store {
        Store::open_with_backend(
            disk.backend(),
            Path::new("simulated"),
            UnixNanos::from_secs(1),
            CommitMode::Durable,
        )
        .expect("a blank simulated disk opens")
    }

    fn ids(store: &Store) -> Vec<String> {
        let records = store.records().expect("records read after the reopen");
        records.into_iter().map(|r| r.key.image_id.0).collect()
    }

    /// A disk that fails every write for a while (full, then cleared): the failed commit marks
    /// the store unhealthy, calls while the disk still fails stay errors (the reopen fails
    /// too), and the first call once it writes again reopens the same disk and commits, with
    /// what was committed before intact. Without the reopen, redb answers "Previous I/O error"
    /// for ever.
    #[test]
    fn a_transient_write_failure_is_survived_by_reopening_the_same_disk() {
        let disk = PowerLossDisk::new(Vec::new(), None);
        let store = open(&disk);
        assert!(store.apply(&upsert("sha256:before", 2)).expect("commit"));

        disk.cut_after(0);
        let failed = store
            .apply(&upsert("sha256:during", 3))
            .expect_err("every write fails");
        assert!(failed.is_io_failure(), "{failed}");
        assert!(!store.is_healthy());
        let still = store
            .apply(&upsert("sha256:during", 3))
            .expect_err("the disk still fails: the reopen cannot recover it");
        assert!(still.is_io_failure(), "{still}");
        assert!(!store.is_healthy());
        assert_eq!(store.reopens(), 0);

        disk.restore_power();
        assert!(
            store
                .apply(&upsert("sha256:after", 4))
                .expect("commits after the reopen")
        );
        assert!(store.is_healthy());
        assert_eq!(store.reopens(), 1);
        let found = ids(&store);
        assert!(found.contains(&"sha256:before".to_owned()), "{found:?}");
        assert!(found.contains(&"sha256:after".to_owned()), "{found:?}");
        assert_eq!(store.check_invariants().expect("check"), []);
    }

    /// A handle redb latched without this store seeing the error (here: the healthy flag is
    /// set back by hand after the failure): the call meets "Previous I/O error", reopens and
    /// runs once more, and succeeds.
    #[test]
    fn a_call_that_meets_a_latched_handle_reopens_and_is_retried_once() {
        let disk = PowerLossDisk::new(Vec::new(), None);
        let store = open(&disk);
        assert!(store.apply(&upsert("sha256:before", 2)).expect("commit"));
        disk.cut_after(0);
        store
            .apply(&upsert("sha256:during", 3))
            .expect_err("every write fails");
        disk.restore_power();
        store.liveness.healthy.store(true, Ordering::SeqCst);

        assert!(
            store
                .apply(&upsert("sha256:after", 4))
                .expect("retried after the reopen")
        );
        assert_eq!(store.reopens(), 1);
        assert!(store.is_healthy());
        assert!(ids(&store).contains(&"sha256:after".to_owned()));
    }

    /// A scan that began before a reopen (detect holds one across its awaits) is ended by
    /// it: the next read fails with `Reopened` instead of reading pages of the dropped
    /// handle's snapshot, which the new handle may reuse. Both lazy walks, and a walk begun
    /// after the reopen reads everything.
    #[test]
    fn a_scan_begun_before_a_reopen_fails_instead_of_reading_on() {
        let disk = PowerLossDisk::new(Vec::new(), None);
        let store = open(&disk);
        for (id, used) in [("sha256:a", 2), ("sha256:b", 3), ("sha256:c", 4)] {
            assert!(store.apply(&upsert(id, used)).expect("commit"));
        }
        let mut by_key = store.records_in_key_order().expect("scan");
        let mut by_age = store.eviction_order().expect("scan");
        let first = by_key.next().expect("a record").expect("read");
        assert_eq!(first.key.image_id.0, "sha256:a");
        let first = by_age.next().expect("a record").expect("read");
        assert_eq!(first.key.image_id.0, "sha256:a");

        disk.cut_after(0);
        store
            .apply(&upsert("sha256:d", 5))
            .expect_err("every write fails");
        disk.restore_power();
        assert!(
            store
                .apply(&upsert("sha256:e", 6))
                .expect("commits after the reopen")
        );
        assert_eq!(store.reopens(), 1);

        for (walk, next) in [
            ("key order", by_key.next()),
            ("eviction order", by_age.next()),
        ] {
            match next {
                Some(Err(StoreError::Reopened { .. })) => {}
                other => panic!("{walk}: the scan read on across the reopen: {other:?}"),
            }
        }
        drop((by_key, by_age));
        let fresh: Vec<String> = store
            .records_in_key_order()
            .expect("scan")
            .map(|r| r.expect("read").key.image_id.0)
            .collect();
        assert_eq!(fresh, ["sha256:a", "sha256:b", "sha256:c", "sha256:e"]);
    }
}
