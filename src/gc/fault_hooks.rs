//! Fault hooks: the points in GC where a test harness may switch a known bug back on, to prove
//! it catches that bug (the simulator's mutants, feature `sim-mutants`). GC owns the trait and
//! names no harness: a harness implements [`FaultHooks`] and installs it once for the process
//! (`install_fault_hooks`, feature `sim-mutants` only), and decides itself when a hook fires
//! (the simulator: per thread, so tests running in parallel do not see each other's mutant).
//!
//! Invariants: every method's default is the real behaviour (no fault); without the
//! `sim-mutants` feature nothing can be installed and [`fault_hooks`] is the no-op, so a
//! production build's hooks compile to constants; a hook is read when its point is reached
//! (never captured at a manager's construction), so a harness may switch it on and off between
//! cycles of one manager.

use std::collections::BTreeMap;

use crate::model::{ImageRecord, RecordKey, UnixNanos};

use super::detect::DetectPlan;

/// One method per point where GC can be made to misbehave; each default is the real code.
pub(crate) trait FaultHooks: Sync {
    /// Whether detect keeps a copy of the records its merge read, for [`Self::blind_detect`].
    fn detect_snapshot(&self) -> bool {
        false
    }

    /// Detect's plan before it is applied: the real plan, or one rewritten from the records'
    /// snapshot `existing` (empty unless [`Self::detect_snapshot`] asked for it).
    fn blind_detect(
        &self,
        plan: DetectPlan,
        existing: &BTreeMap<RecordKey, ImageRecord>,
        now: UnixNanos,
    ) -> DetectPlan {
        let _ = (existing, now);
        plan
    }

    /// Whether the GC walk removes its victims without the last look (`rescue`).
    fn skip_last_look(&self) -> bool {
        false
    }

    /// Whether the GC ignores the warm set (detect's warm keep and the last look's).
    fn ignore_warm(&self) -> bool {
        false
    }

    /// Whether pins and irreplaceable images protect nothing (detect's protections and the
    /// last look's read of the pins).
    fn ignore_protections(&self) -> bool {
        false
    }

    /// Whether the byte walk makes one removal more after it freed its amount.
    fn over_free(&self) -> bool {
        false
    }

    /// Whether HighThresholdPercent 100 turns the byte-percentage pass off whatever MaxAge is
    /// (`GcPolicy::space_pass_off`).
    fn space_pass_off_at_high_100(&self) -> bool {
        false
    }
}

/// The real code: every hook at its default.
struct NoFaults;

impl FaultHooks for NoFaults {}

#[cfg(feature = "sim-mutants")]
static INSTALLED: std::sync::OnceLock<&'static dyn FaultHooks> = std::sync::OnceLock::new();

/// Installs `hooks` for the whole process (feature `sim-mutants` only). The first install
/// wins; a later one is ignored and returns false.
#[cfg(feature = "sim-mutants")]
pub(crate) fn install_fault_hooks(hooks: &'static dyn FaultHooks) -> bool {
    INSTALLED.set(hooks).is_ok()
}

/// The hooks in force: the installed ones, else (and always without `sim-mutants`) the real
/// code's.
#[inline]
pub(crate) fn fault_hooks() -> &'static dyn FaultHooks {
    #[cfg(feature = "sim-mutants")]
    if let Some(hooks) = INSTALLED.get() {
        return *hooks;
    }
    &NoFaults
}
