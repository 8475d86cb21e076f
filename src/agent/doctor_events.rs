//! Wiring the doctor to the Node Events: `imagekeeper doctor`'s conflicts found at start
//! (`run --kubelet-config`) become `KubeletConfigConflict` Warnings. It lives in the agent, the
//! one layer that sees both, so `telemetry` does not import `doctor`.
//!
//! Invariants: only findings whose status is Conflict are published, one Event each, in order.

use crate::doctor::{Finding, Status};
use crate::telemetry::NodeEvents;

impl NodeEvents {
    /// `imagekeeper doctor`'s conflicts found at start (`run --kubelet-config`): one Warning
    /// each, `KubeletConfigConflict`, naming the check, what conflicts and the fix.
    pub fn doctor_conflicts(&self, findings: &[Finding]) {
        for finding in findings.iter().filter(|f| f.status == Status::Conflict) {
            self.kubelet_config_conflict(&finding.check, &finding.message, finding.fix.as_deref());
        }
    }
}
