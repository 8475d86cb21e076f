//! Known bug classes switched back on, to prove the simulator catches them (feature
//! `sim-mutants` only). GC's `FaultHooks` name the points; [`SimFaults`] implements them,
//! installed for the process by the first [`set`] (without the feature nothing can be
//! installed and the hooks are GC's no-op). The mutant is chosen per thread (the simulator
//! runs each seed on one thread), so tests running in parallel do not see each other's mutant.
//!
//! - [`Mutant::BlindDetect`]: detect writes each listed record as an upsert computed from its
//!   stale snapshot and removes unlisted records unconditionally, as before the merge writes;
//! - [`Mutant::NoLastLook`]: the GC walk removes its victims without the last look (`rescue`);
//! - [`Mutant::NoWarmKeep`]: the GC ignores the warm set (`ImageGcManager::warm` and the
//!   last look keep nothing for it);
//! - [`Mutant::NoProtections`]: GC ignores pins and irreplaceable images (the hooks in
//!   `detect_locked` and before the last look's read of the pins);
//! - [`Mutant::OverFree`]: the GC's byte walk makes one removal more after it freed its
//!   amount (the hook in `free_space`);
//! - [`Mutant::SpacePassOffAtHigh100`]: HighThresholdPercent 100 turns the byte-percentage
//!   pass off whatever MaxAge is (the hook in `GcPolicy::space_pass_off`);
//! - [`Mutant::NonDurable`]: every commit uses `Durability::None` (no hook: the store's
//!   `CommitMode::NonDurableForTests`, chosen by the simulator when it opens the store).

use std::cell::Cell;
use std::collections::BTreeMap;

use crate::gc::detect::DetectPlan;
use crate::gc::fault_hooks::{FaultHooks, install_fault_hooks};
use crate::model::{ImageRecord, RecordKey, UnixNanos};
use crate::store::{Batch, BatchOp, meta_keys};

use super::Mutant;

thread_local! {
    static ACTIVE: Cell<Option<Mutant>> = const { Cell::new(None) };
}

/// Switches `mutant` on (or every mutant off) for this thread. The first call installs
/// [`SimFaults`] as GC's fault hooks for the process: with no mutant on, they are the real code.
pub fn set(mutant: Option<Mutant>) {
    install_fault_hooks(&SimFaults);
    ACTIVE.with(|a| a.set(mutant));
}

/// Whether `mutant` is on for this thread.
pub fn active(mutant: Mutant) -> bool {
    ACTIVE.with(Cell::get) == Some(mutant)
}

/// The simulator's mutants as GC's fault hooks: each hook fires when its mutant is on for
/// the calling thread.
pub struct SimFaults;

impl FaultHooks for SimFaults {
    /// Detect keeps its records' snapshot only for [`Mutant::BlindDetect`].
    fn detect_snapshot(&self) -> bool {
        active(Mutant::BlindDetect)
    }

    /// The hook in `detect_locked`: under [`Mutant::BlindDetect`], the plan rewritten into blind
    /// writes from the snapshot `existing`; otherwise the plan as it is.
    fn blind_detect(
        &self,
        mut plan: DetectPlan,
        existing: &BTreeMap<RecordKey, ImageRecord>,
        now: UnixNanos,
    ) -> DetectPlan {
        if !active(Mutant::BlindDetect) {
            return plan;
        }
        let mut batch = Batch::new();
        for op in plan.batch.expanded_ops() {
            match op.as_ref() {
                BatchOp::Sight { key, sighting, .. } => batch.upsert(
                    key.clone(),
                    ImageRecord::after_sighting(existing.get(key).copied(), *sighting),
                ),
                BatchOp::RemoveUnlisted { key, .. } => batch.remove(key.clone()),
                BatchOp::SetMeta { name, value } => batch.set_meta(name.clone(), *value),
                BatchOp::ClampFuture { key, limit, now } => {
                    batch.clamp_future(key.clone(), *limit, *now)
                }
                other => {
                    let _ = other;
                }
            }
        }
        batch.stamp_if_changed(meta_keys::LAST_DETECT, now.0);
        plan.batch = batch;
        plan
    }

    /// The hook at the top of `rescue`: under [`Mutant::NoLastLook`], keep nothing.
    fn skip_last_look(&self) -> bool {
        active(Mutant::NoLastLook)
    }

    /// The hook in the GC's warm keep: under [`Mutant::NoWarmKeep`], the warm set keeps nothing.
    fn ignore_warm(&self) -> bool {
        active(Mutant::NoWarmKeep)
    }

    /// The hooks in `detect_locked` and `rescue`: under [`Mutant::NoProtections`], pins and
    /// irreplaceable images protect nothing.
    fn ignore_protections(&self) -> bool {
        active(Mutant::NoProtections)
    }

    /// The hook in the GC's byte walk: under [`Mutant::OverFree`], the walk takes one image more
    /// once it freed its amount.
    fn over_free(&self) -> bool {
        active(Mutant::OverFree)
    }

    /// The hook in `GcPolicy::space_pass_off`: under [`Mutant::SpacePassOffAtHigh100`], high 100
    /// turns the byte-percentage pass off whatever MaxAge is.
    fn space_pass_off_at_high_100(&self) -> bool {
        active(Mutant::SpacePassOffAtHigh100)
    }
}
