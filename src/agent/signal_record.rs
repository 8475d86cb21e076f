//! After each detect, the agent records the changes of what the cluster declared
//! (`clusterSignals`: the pods bound to the node, the CronJobs, the rollouts) in the store's
//! `signals` table, for `inspect workload` (`gc::SignalRecord` decides what changed;
//! `migrations/0007_signals.md`).
//!
//! Invariants: nothing is read or written until a watch has listed its objects (with
//! `clusterSignals` off, never); the record is rebuilt from the table at its first use, so a
//! restart writes nothing that did not change; a line's `at` is the clock's time just after
//! the detect that saw it; a failed append is logged and its changes are found again at the
//! next detect, as is one whose removed CronJobs' last lines cannot be read back; the store
//! is called off the async workers.

use std::sync::Arc;

use tracing::warn;

use crate::gc::{SignalRecord, SignalsNow};
use crate::model::SignalKind;
use crate::store::{Store, StoreError};

use super::{Agent, AgentRuntime};

/// Runs `call` on `store` off the async workers; a failure is logged as `Cannot {what}` (or
/// the blocking task's own failure) and is `None`.
async fn off_the_workers<T: Send + 'static>(
    store: &Arc<Store>,
    what: &'static str,
    call: impl FnOnce(&Store) -> Result<T, StoreError> + Send + 'static,
) -> Option<T> {
    let store = Arc::clone(store);
    match tokio::task::spawn_blocking(move || call(&store)).await {
        Ok(Ok(value)) => Some(value),
        Ok(Err(e)) => {
            warn!(error = %e, "Cannot {what}");
            None
        }
        Err(e) => {
            warn!(error = %e, "The task to {what} failed");
            None
        }
    }
}

impl<R: AgentRuntime> Agent<R> {
    /// Records what changed in the signals the watches hold since the last recorded line of
    /// each (see the module's invariants).
    pub(super) async fn record_signals(&self) {
        let watches = SignalsNow::of(&self.gc.cluster_signals(), &self.gc.bound_pods());
        if watches == SignalsNow::default() {
            return;
        }
        let at = self.clock.now();
        let mut held = self.signal_record.lock().await;
        if held.is_none() {
            let read = "read the recorded cluster signals";
            let Some(entries) = off_the_workers(&self.store, read, Store::signals).await else {
                return;
            };
            *held = Some(SignalRecord::from_entries(&entries));
        }
        let Some(record) = held.as_mut() else {
            return;
        };
        let gone = record.cronjobs_gone(&watches);
        let gone_lines = if gone.is_empty() {
            Vec::new()
        } else {
            let read = "read the removed CronJobs' recorded lines";
            let last = move |store: &Store| store.last_signals(SignalKind::CronJob, &gone);
            let Some(lines) = off_the_workers(&self.store, read, last).await else {
                return;
            };
            lines
        };
        let written = record.changes(&watches, at, &gone_lines);
        if written.is_empty() {
            record.recorded(&watches, &[]);
            return;
        }
        let entries = written.clone();
        let append = move |store: &Store| store.append_signals(&entries);
        let write = "record the cluster signals' changes";
        if off_the_workers(&self.store, write, append).await.is_some() {
            record.recorded(&watches, &written);
        }
    }
}

#[cfg(test)]
#[path = "signal_record_tests.rs"]
mod tests;
