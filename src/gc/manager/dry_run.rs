//! The dry run (`gc --dry-run`, `inspect explain` against a live runtime): what GarbageCollect or
//! DeleteUnusedImages would remove, from the runtime's lists folded into a copy of the records
//! and explained with the manager's own rules (`explain.rs`).
//!
//! Invariants: it writes nothing and takes no cycle lock; it takes the settings once at its start;
//! its removals are in the order the real cycle would make them (MaxAge first).

use std::collections::BTreeMap;

use crate::model::{ImageLike, JournalEntry, RecordKey, UnixNanos};
use crate::runtime::ImageRuntime;
use crate::store::{JournalKey, StoredRecord};

use crate::gc::adaptive::{self, AdaptiveRank};
use crate::gc::attempt::STATS_OP;
use crate::gc::detect::ListedImages;
use crate::gc::detect::apply_to_copy;
use crate::gc::evict::Verdict;
use crate::gc::explain::{
    Decision, ExplainContext, Explanation, FsSpace, explain_in, note_adaptive_ranks,
    note_over_keep_share, note_predictive_ranks, note_prior_evictions,
};
use crate::gc::metrics::RemovalReason;
use crate::gc::predictive::{self, PredictiveRank};
use crate::gc::{GcError, GcOrder};

use super::{GcPlan, ImageGcManager, Removal, Settings, runtime_error};

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
        let ((listed, in_use, _, mut kubelet, protections), detect) = self
            .observe_and_plan(&settings, now, Some(&mut records))
            .await?;
        // The kubelet's observed preloaded records are shown, never a use: read here for the
        // explanation only, not at every detect.
        if let Some(reader) = settings.kubelet() {
            kubelet.with_preloaded(listed.iter(), &reader.preloaded().found);
        }
        apply_to_copy(&mut records, &detect.batch);
        let (sets, over_share) =
            self.keep_sets(&settings, &listed, &in_use, now, super::keeps::Share::Look)?;
        // A dry run only: the real cycle reads this order from the index (or, adaptive, ranks
        // the listed images).
        let ordered: Vec<StoredRecord> = records
            .into_iter()
            .map(|(key, record)| StoredRecord { key, record })
            .collect();
        let journal = self.store.journal()?;
        let ranked = self.dry_run_order(&settings, ordered, &listed, &journal, now)?;
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
            &ranked.records,
            Some(now),
            settings.config.policy,
            fs,
            now,
            &ExplainContext {
                sets: &sets,
                kubelet: &kubelet,
                watch: &detect.watch,
                image_fs: image_fs.as_ref(),
                protections: &protections,
            },
        );
        note_prior_evictions(&mut explanation, &journal);
        note_adaptive_ranks(&mut explanation, &ranked.adaptive);
        note_predictive_ranks(&mut explanation, &ranked.predictive);
        if let Some(over) = &over_share {
            note_over_keep_share(&mut explanation, over);
        }
        let removals = planned_removals(&explanation, delete_unused);
        Ok(GcPlan {
            explanation,
            removals,
        })
    }

    /// The records in the order the real cycle's walk would read them: the index's (kubelet
    /// order), or the adaptive or predictive ranking with each image's rank for explain.
    fn dry_run_order(
        &self,
        settings: &Settings,
        mut ordered: Vec<StoredRecord>,
        listed: &ListedImages,
        journal: &[(JournalKey, JournalEntry)],
        now: UnixNanos,
    ) -> Result<DryRunOrder, GcError> {
        let mut order = DryRunOrder::default();
        let tags = || -> BTreeMap<RecordKey, Vec<String>> {
            listed
                .iter()
                .map(|i| (i.record_key(), i.repo_tags().to_strings()))
                .collect()
        };
        match settings.config.order {
            GcOrder::KubeletOrder => {
                ordered.sort_by(|a, b| {
                    (a.record.last_used, a.record.first_detected, &a.key).cmp(&(
                        b.record.last_used,
                        b.record.first_detected,
                        &b.key,
                    ))
                });
                order.records = ordered;
            }
            GcOrder::Adaptive => {
                let ranked = adaptive::rank(ordered, &adaptive::returns(journal), &tags());
                for (record, rank) in ranked {
                    order.adaptive.insert(record.key.clone(), rank);
                    order.records.push(record);
                }
            }
            GcOrder::Predictive => {
                // What the cluster knows, as the real walk reads it (`walk.rs`).
                let known = self.cluster_signals.known_uses(now);
                let known: BTreeMap<RecordKey, crate::gc::KnownUse> = if known.is_empty() {
                    BTreeMap::new()
                } else {
                    let index = crate::gc::signals::KnownIndex::of(&known);
                    listed
                        .iter()
                        .filter_map(|i| index.of_image(&i).map(|k| (i.record_key(), k)))
                        .collect()
                };
                let ranked = predictive::rank_predictive_with(
                    ordered,
                    journal,
                    &tags(),
                    &self.store.uses()?,
                    &self.store.pulls()?,
                    &known,
                    now,
                );
                for (record, rank) in ranked {
                    order.predictive.insert(record.key.clone(), rank);
                    order.records.push(record);
                }
            }
        }
        Ok(order)
    }
}

/// The records of a dry run in the walk's order, with the adaptive or predictive ranks.
#[derive(Default)]
struct DryRunOrder {
    records: Vec<StoredRecord>,
    adaptive: BTreeMap<RecordKey, AdaptiveRank>,
    predictive: BTreeMap<RecordKey, PredictiveRank>,
}

/// What the cycle would remove, in the order it would (MaxAge first); DeleteUnusedImages
/// removes every eligible image.
fn planned_removals(explanation: &Explanation, delete_unused: bool) -> Vec<Removal> {
    let mut removals: Vec<Removal> = explanation
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
        .collect();
    // The MaxAge pass runs before the space walk.
    removals.sort_by_key(|r| r.reason != RemovalReason::Age);
    removals
}
