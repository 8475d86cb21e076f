//! Liveness and readiness, as `/healthz` and `/readyz` answer them.
//!
//! Live: the process answers and its database file is still where it was opened (the agent
//! holds the file's lock for its whole life; a store closed after an I/O failure reopens by
//! itself, so it makes the agent unready, never dead: a restart would not help a full disk).
//! Ready: one detect has completed, the runtime answered the latest detect or image-cache
//! cycle, no detect or image-cache call has waited for the runtime longer than
//! [`RUNTIME_STALL`] (a frozen runtime that accepts calls and never answers kept `/readyz` at
//! 200 for 141 s, until the call timed out), and the store is healthy. The loops report to
//! [`Health`]; nothing here calls the runtime.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use crate::model::UnixNanos;

/// How long a detect or image-cache cycle may wait for the runtime's answer before the agent
/// is unready: a healthy runtime lists its images in well under a second; the calls' own
/// timeout (2 min, the kubelet's) is far longer.
pub const RUNTIME_STALL: Duration = Duration::from_secs(30);

/// What the loops have seen of the runtime.
#[derive(Debug, Default)]
pub struct Health {
    detect_done: AtomicBool,
    /// The error of the latest cycle that could not reach the runtime; None once it answers.
    runtime_error: Mutex<Option<String>>,
    /// The cycles waiting for the runtime now, by id: when each started.
    waiting: Arc<Mutex<BTreeMap<u64, UnixNanos>>>,
    next_wait: AtomicU64,
}

/// A cycle waiting for the runtime, from [`Health::waiting_for_runtime`] until dropped.
pub struct RuntimeWait {
    waiting: Arc<Mutex<BTreeMap<u64, UnixNanos>>>,
    id: u64,
}

impl Drop for RuntimeWait {
    fn drop(&mut self) {
        self.waiting
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.id);
    }
}

impl Health {
    /// A cycle starts waiting for the runtime at `now`, until the returned guard is dropped.
    pub fn waiting_for_runtime(&self, now: UnixNanos) -> RuntimeWait {
        let id = self.next_wait.fetch_add(1, Ordering::Relaxed);
        self.waiting
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id, now);
        RuntimeWait {
            waiting: self.waiting.clone(),
            id,
        }
    }

    /// A detect completed: the runtime answered and the store holds its images.
    pub fn detect_succeeded(&self) {
        self.detect_done.store(true, Ordering::Relaxed);
        self.runtime_reached();
    }

    /// A cycle's call to the runtime was answered.
    pub fn runtime_reached(&self) {
        *self.lock() = None;
    }

    /// A cycle could not reach the runtime.
    pub fn runtime_unreachable(&self, error: String) {
        *self.lock() = Some(error);
    }

    /// Ok, or every reason the agent is not ready at `now`, one per line.
    pub fn readiness(&self, store_healthy: bool, now: UnixNanos) -> Result<String, String> {
        let mut reasons = Vec::new();
        if let Some(error) = self.lock().as_ref() {
            reasons.push(format!("the container runtime cannot be reached: {error}"));
        }
        let oldest = self
            .waiting
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .min()
            .copied();
        if let Some(since) = oldest
            && now.saturating_sub(RUNTIME_STALL) >= since
        {
            let waited = Duration::from_nanos(u64::try_from(now.0 - since.0).unwrap_or(0));
            reasons.push(format!(
                "the container runtime has not answered a call for {}s (frozen?)",
                waited.as_secs()
            ));
        }
        if !self.detect_done.load(Ordering::Relaxed) {
            reasons.push("no image detect has completed yet".to_owned());
        }
        if !store_healthy {
            reasons.push(
                "the record store failed an I/O operation (a full disk?) and has not reopened yet"
                    .to_owned(),
            );
        }
        if reasons.is_empty() {
            Ok("ok: runtime reachable, images detected, record store healthy\n".to_owned())
        } else {
            Err(reasons
                .iter()
                .map(|r| format!("not ready: {r}\n"))
                .collect())
        }
    }

    /// Ok while the database file is still at `db`.
    pub fn liveness(db: &Path, store_healthy: bool) -> Result<String, String> {
        match std::fs::metadata(db) {
            Ok(_) if store_healthy => Ok(format!("ok: alive, database {} open\n", db.display())),
            Ok(_) => Ok(format!(
                "ok: alive, database {} open (reopening after an I/O failure; see /readyz)\n",
                db.display()
            )),
            Err(e) => Err(format!(
                "not alive: the database {} is gone: {e}\n",
                db.display()
            )),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<String>> {
        self.runtime_error.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_only_after_a_detect_with_the_runtime_reached_and_the_store_healthy() {
        let health = Health::default();
        let err = health
            .readiness(true, UnixNanos(1))
            .expect_err("no detect yet");
        assert_eq!(err, "not ready: no image detect has completed yet\n");
        health.runtime_unreachable("connect: No such file or directory".to_owned());
        let err = health
            .readiness(false, UnixNanos(1))
            .expect_err("unreachable");
        assert!(
            err.contains("cannot be reached: connect: No such file"),
            "{err}"
        );
        assert!(err.contains("no image detect"), "{err}");
        assert!(err.contains("has not reopened"), "{err}");
        health.detect_succeeded();
        let ready = "ok: runtime reachable, images detected, record store healthy\n";
        assert_eq!(health.readiness(true, UnixNanos(1)), Ok(ready.to_owned()));
        assert_eq!(
            health.readiness(false, UnixNanos(1)),
            Err(
                "not ready: the record store failed an I/O operation (a full disk?) and has not reopened yet\n"
                    .to_owned()
            )
        );
        health.runtime_unreachable("Unavailable".to_owned());
        let err = health
            .readiness(true, UnixNanos(1))
            .expect_err("runtime went away");
        assert_eq!(
            err,
            "not ready: the container runtime cannot be reached: Unavailable\n"
        );
        health.runtime_reached();
        assert_eq!(health.readiness(true, UnixNanos(1)), Ok(ready.to_owned()));
    }

    /// Issue 41: a runtime that takes calls and never answers: unready once a cycle has
    /// waited [`RUNTIME_STALL`], ready again when the call ends.
    #[test]
    fn unready_when_a_cycle_has_waited_for_the_runtime_past_the_stall_bound() {
        let health = Health::default();
        health.detect_succeeded();
        let t0 = UnixNanos(1_000_000_000_000);
        let at = |d: Duration| t0.saturating_add(d);
        let wait = health.waiting_for_runtime(t0);
        let early = health.waiting_for_runtime(at(Duration::from_secs(10)));
        assert!(
            health
                .readiness(true, at(RUNTIME_STALL - Duration::from_nanos(1)))
                .is_ok()
        );
        let err = health
            .readiness(true, at(RUNTIME_STALL))
            .expect_err("waited the stall bound");
        assert_eq!(
            err,
            "not ready: the container runtime has not answered a call for 30s (frozen?)\n"
        );
        drop(wait);
        assert!(
            health.readiness(true, at(RUNTIME_STALL)).is_ok(),
            "the later call: 20 s"
        );
        drop(early);
        assert!(
            health
                .readiness(true, at(Duration::from_secs(3600)))
                .is_ok()
        );
    }

    #[test]
    fn alive_while_the_database_file_exists() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = dir.path().join("records.redb");
        let gone = Health::liveness(&db, true).expect_err("no database file");
        assert!(
            gone.starts_with(&format!(
                "not alive: the database {} is gone: ",
                db.display()
            )),
            "{gone}"
        );
        std::fs::write(&db, b"x").expect("write");
        assert_eq!(
            Health::liveness(&db, true),
            Ok(format!("ok: alive, database {} open\n", db.display()))
        );
        let body = Health::liveness(&db, false).expect("unhealthy store is still alive");
        assert!(body.contains("reopening"), "{body}");
    }
}
