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

use super::{Agent, AgentRuntime};

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
            let store = Arc::clone(&self.store);
            match tokio::task::spawn_blocking(move || store.signals()).await {
                Ok(Ok(entries)) => *held = Some(SignalRecord::from_entries(&entries)),
                Ok(Err(e)) => {
                    warn!(error = %e, "Cannot read the recorded cluster signals");
                    return;
                }
                Err(e) => {
                    warn!(error = %e, "The task reading the recorded cluster signals failed");
                    return;
                }
            }
        }
        let Some(record) = held.as_mut() else {
            return;
        };
        let gone = record.cronjobs_gone(&watches);
        let gone_lines = if gone.is_empty() {
            Vec::new()
        } else {
            let store = Arc::clone(&self.store);
            match tokio::task::spawn_blocking(move || {
                store.last_signals(SignalKind::CronJob, &gone)
            })
            .await
            {
                Ok(Ok(lines)) => lines,
                Ok(Err(e)) => {
                    warn!(error = %e, "Cannot read the removed CronJobs' recorded lines");
                    return;
                }
                Err(e) => {
                    warn!(error = %e, "The task reading the removed CronJobs' lines failed");
                    return;
                }
            }
        };
        let written = record.changes(&watches, at, &gone_lines);
        if written.is_empty() {
            record.recorded(&watches, &[]);
            return;
        }
        let store = Arc::clone(&self.store);
        let entries = written.clone();
        match tokio::task::spawn_blocking(move || store.append_signals(&entries)).await {
            Ok(Ok(())) => record.recorded(&watches, &written),
            Ok(Err(e)) => warn!(error = %e, "Cannot record the cluster signals' changes"),
            Err(e) => warn!(error = %e, "The task recording the cluster signals failed"),
        }
    }
}

#[cfg(test)]
#[path = "signal_record_tests.rs"]
mod tests;
