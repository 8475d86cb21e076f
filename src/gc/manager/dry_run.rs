//! The dry run (`gc --dry-run`, `inspect explain` against a live runtime): what GarbageCollect or
//! DeleteUnusedImages would remove, from the runtime's lists folded into a copy of the records
//! and explained with the manager's own rules (`explain.rs`).
//!
//! Invariants: it writes nothing and takes no cycle lock; it takes the settings once at its start;
//! its removals are in the order the real cycle would make them (MaxAge first).

use std::collections::BTreeMap;

use crate::model::{ImageLike, UnixNanos};
use crate::runtime::ImageRuntime;
use crate::store::StoredRecord;

use crate::gc::adaptive::{self};
use crate::gc::attempt::STATS_OP;
use crate::gc::detect::apply_to_copy;
use crate::gc::evict::Verdict;
use crate::gc::explain::{
    Decision, ExplainContext, FsSpace, explain_in, note_adaptive_ranks, note_predictive_ranks,
    note_prior_evictions,
};
use crate::gc::metrics::RemovalReason;
use crate::gc::predictive::{self};
use crate::gc::{GcError, GcOrder};

use super::{GcPlan, ImageGcManager, Removal, runtime_error};

impl<R: ImageRuntime> ImageGcManager<R> {
    /// What GarbageCollect (or, with `delete_unused`, DeleteUnusedImages) would do at `now`,
    /// changing nothing: the runtime's lists are folded into a copy of the records in memory
    /// and explained with the manager's own rules. The removals are in the order the real
    /// cycle would make them. It writes nothing, so it takes no cycle lock: a dry run answers
    /// while a long GC runs (from the records as they are at that moment).
    pub async fn plan(&self, now: UnixNanos, delete_unused: bool) -> Result<GcPlan, GcError> {
        // One configuration for the whole dry run, even if a reload swaps it meanwhile.
        let settings = self.settings();
        let mut records = BTreeMap::new();
        let ((listed, _, _, mut kubelet, protections), detect) = self
            .observe_and_plan(&settings, now, Some(&mut records))
            .await?;
        // The kubelet's observed preloaded records are shown, never a use: read here for the
        // explanation only, not at every detect.
        if let Some(reader) = settings.kubelet() {
            kubelet.with_preloaded(listed.iter(), &reader.preloaded().found);
        }
        apply_to_copy(&mut records, &detect.batch);
        let pulling = self.pulling(&listed);
        let warm = self.warm(&settings, &listed, now)?;
        // A dry run only: the real cycle reads this order from the index (or, adaptive, ranks
        // the listed images).
        let mut ordered: Vec<StoredRecord> = records
            .into_iter()
            .map(|(key, record)| StoredRecord { key, record })
            .collect();
        let journal = self.store.journal()?;
        let mut ranks = BTreeMap::new();
        let mut predictive_ranks = BTreeMap::new();
        match settings.config.order {
            GcOrder::KubeletOrder => ordered.sort_by(|a, b| {
                (a.record.last_used, a.record.first_detected, &a.key).cmp(&(
                    b.record.last_used,
                    b.record.first_detected,
                    &b.key,
                ))
            }),
            GcOrder::Adaptive => {
                let tags = listed
                    .iter()
                    .map(|i| (i.record_key(), i.repo_tags().to_strings()))
                    .collect();
                let ranked = adaptive::rank(ordered, &adaptive::returns(&journal), &tags);
                ordered = Vec::with_capacity(ranked.len());
                for (record, rank) in ranked {
                    ranks.insert(record.key.clone(), rank);
                    ordered.push(record);
                }
            }
            GcOrder::Predictive => {
                let tags = listed
                    .iter()
                    .map(|i| (i.record_key(), i.repo_tags().to_strings()))
                    .collect();
                let ranked = predictive::rank_predictive(
                    ordered,
                    &journal,
                    &tags,
                    &self.store.uses()?,
                    &self.store.pulls()?,
                    now,
                );
                ordered = Vec::with_capacity(ranked.len());
                for (record, rank) in ranked {
                    predictive_ranks.insert(record.key.clone(), rank);
                    ordered.push(record);
                }
            }
        }
        let image_fs = if delete_unused {
            None
        } else {
            Some(
                self.runtime
                    .image_fs_stats()
                    .await
                    .map_err(runtime_error(STATS_OP))?,
            )
        };
        let fs = image_fs.as_ref().map(|stats| FsSpace {
            capacity: stats.capacity,
            available: stats.available,
        });
        let mut explanation = explain_in(
            &ordered,
            Some(now),
            settings.config.policy,
            fs,
            now,
            &ExplainContext {
                pulling: &pulling,
                kubelet: &kubelet,
                watch: &detect.watch,
                image_fs: image_fs.as_ref(),
                warm: &warm,
                protections: &protections,
            },
        );
        note_prior_evictions(&mut explanation, &journal);
        note_adaptive_ranks(&mut explanation, &ranks);
        note_predictive_ranks(&mut explanation, &predictive_ranks);
        let removals = explanation
            .images
            .iter()
            .filter_map(|i| {
                let reason = if delete_unused {
                    (i.verdict == Verdict::Eligible).then_some(RemovalReason::Unused)
                } else {
                    match i.decision {
                        Decision::RemoveForAge => Some(RemovalReason::Age),
                        Decision::RemoveForSpace => Some(RemovalReason::Space),
                        Decision::RemoveForBudget => Some(RemovalReason::Budget),
                        _ => None,
                    }
                };
                reason.map(|reason| Removal {
                    key: i.key.clone(),
                    size: i.record.size,
                    reason,
                    evicted_before: i.evicted_before.map(|p| p.describe()),
                })
            })
            .collect::<Vec<_>>();
        let mut removals = removals;
        // The MaxAge pass runs before the space walk.
        removals.sort_by_key(|r| r.reason != RemovalReason::Age);
        Ok(GcPlan {
            explanation,
            removals,
        })
    }
}
