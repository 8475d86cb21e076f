//! Planning the space walk: which records the eviction walk would remove, read lazily from the
//! store's eviction index, without removing anything. The manager removes what a step plans
//! and resumes after it; benches and tools call [`plan_space_victims`] for the whole plan.

use std::collections::BTreeSet;
use std::time::Duration;

use crate::model::RecordKey;
use crate::model::UnixNanos;
use crate::store::{EvictionKey, Store, StoreError, StoredRecord};

use super::evict::{Verdict, space_verdict};

/// One step of the space walk.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SpaceStep {
    /// Eligible records, oldest first.
    pub victims: Vec<StoredRecord>,
    /// The last index entry the step read; the next step resumes after it. `None` when the
    /// step read nothing.
    pub resume: Option<EvictionKey>,
}

/// The fixed inputs of one space walk (kubelet's freeSpace).
#[derive(Clone, Copy, Debug)]
pub struct SpaceWalk<'a> {
    /// Record keys in use at the last detect.
    pub in_use: &'a BTreeSet<RecordKey>,
    /// The GC's start: images used at or after it are kept.
    pub free_time: UnixNanos,
    /// Images first detected less than this before `free_time` are kept.
    pub min_age: Duration,
    /// The walk stops once this many bytes are planned.
    pub bytes_to_free: i64,
}

impl SpaceWalk<'_> {
    /// One synchronous step of the walk over the index: starting after `after` (from the
    /// oldest entry when `None`), picks eligible records (see [`space_verdict`]) until
    /// `already_planned` plus their sizes reaches `bytes_to_free` or `max_victims` are picked.
    /// The read transaction ends when this returns.
    pub fn step(
        &self,
        store: &Store,
        after: Option<&EvictionKey>,
        already_planned: i64,
        max_victims: usize,
    ) -> Result<SpaceStep, StoreError> {
        let mut step = SpaceStep::default();
        if max_victims == 0 {
            return Ok(step);
        }
        let scan = match after {
            None => store.eviction_order()?,
            Some(after) => store.eviction_order_after(after)?,
        };
        let mut planned = already_planned;
        for entry in scan {
            let entry = entry?;
            step.resume = Some(EvictionKey::of(&entry.key, &entry.record));
            let verdict = space_verdict(
                &entry.key,
                &entry.record,
                self.in_use,
                self.free_time,
                self.min_age,
            );
            if verdict != Verdict::Eligible {
                continue;
            }
            planned = planned.saturating_add(to_i64(entry.record.size));
            step.victims.push(entry);
            if planned >= self.bytes_to_free || step.victims.len() >= max_victims {
                break;
            }
        }
        Ok(step)
    }
}

/// The records a space walk at `free_time` would remove to free `bytes_to_free`, oldest
/// first, if every removal succeeded: one lazy scan of the index that stops as soon as enough
/// is planned. Removes nothing.
pub fn plan_space_victims(
    store: &Store,
    in_use: &BTreeSet<RecordKey>,
    free_time: UnixNanos,
    min_age: Duration,
    bytes_to_free: i64,
) -> Result<Vec<StoredRecord>, StoreError> {
    let walk = SpaceWalk {
        in_use,
        free_time,
        min_age,
        bytes_to_free,
    };
    walk.step(store, None, 0, usize::MAX)
        .map(|step| step.victims)
}

pub(super) fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}
