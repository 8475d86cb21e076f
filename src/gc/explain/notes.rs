//! What explain adds to an explanation from other sources once it is worked out: a removal
//! the journal shows was pulled back ([`PriorEviction`], `note_prior_evictions`), each
//! image's place in the adaptive or predictive order (`note_adaptive_ranks`,
//! `note_predictive_ranks`), and an image the cluster needs that the keep share left to the
//! order (`note_over_keep_share`).
//!
//! Invariants: notes only add to an image's reason and fields, never change a decision; the
//! explanation's images must already be in the order whose ranks are noted.

use crate::model::{JournalEntry, RecordKey, Remover};
use crate::store::JournalKey;

use crate::format::go_duration;
use crate::gc::adaptive::AdaptiveRank;
use crate::gc::predictive::PredictiveRank;

use super::{Explanation, PriorEviction};

/// Notes on each image the keep share left to the order what needs it and why it is not kept
/// (`clusterSignalsKeepShare`).
pub fn note_over_keep_share(explanation: &mut Explanation, over: &crate::gc::KeepsOverShare) {
    for image in &mut explanation.images {
        let Some((_, source, _)) = over.left.iter().find(|(key, _, _)| *key == image.key) else {
            continue;
        };
        image.reason.push_str(&format!(
            "; needed by {source}, but past clusterSignalsKeepShare ({}% of the image \
             filesystem, {} kept by the signals): left to the order",
            over.share_percent,
            crate::format::format_size(over.held)
        ));
        image.past_keep_share = Some(source.clone());
    }
}

/// Notes on each explained image the newest journaled removal of its image id after which
/// it was pulled back, and says so in its reason: a candidate that was evicted before and
/// came back is a sign of thrash (`explain`, `gc --dry-run`).
pub fn note_prior_evictions(explanation: &mut Explanation, journal: &[(JournalKey, JournalEntry)]) {
    for image in &mut explanation.images {
        // The journal is oldest first: the last match is the newest.
        let Some((key, entry)) = journal
            .iter()
            .rev()
            .find(|(k, e)| k.key.image_id == image.key.image_id && e.repulled_at.is_some())
        else {
            continue;
        };
        let Some(repulled_at) = entry.repulled_at else {
            continue;
        };
        let prior = PriorEviction {
            removed_at: key.removed_at,
            remover: entry.remover,
            reason: entry.reason,
            repulled_at,
        };
        image.reason.push_str("; ");
        image.reason.push_str(&prior.describe());
        image.evicted_before = Some(prior);
    }
}

/// Notes on each explained image its place in the adaptive order (`ranks`, by key), and says
/// why in its reason: the explanation's images must be in that order.
pub fn note_adaptive_ranks(
    explanation: &mut Explanation,
    ranks: &std::collections::BTreeMap<RecordKey, AdaptiveRank>,
) {
    for image in &mut explanation.images {
        if let Some(rank) = ranks.get(&image.key) {
            image.reason.push_str("; ");
            image.reason.push_str(&rank.describe());
            image.adaptive = Some(rank.clone());
        }
    }
}

/// Notes on each explained image its place in the predictive order (`ranks`, by key): its
/// estimate and what it came from, in its reason. The explanation's images must be in that
/// order (their `rank` is then the predictive rank).
pub fn note_predictive_ranks(
    explanation: &mut Explanation,
    ranks: &std::collections::BTreeMap<RecordKey, PredictiveRank>,
) {
    for image in &mut explanation.images {
        if let Some(rank) = ranks.get(&image.key) {
            image.reason.push_str("; ");
            image.reason.push_str(&rank.describe());
            image.predictive = Some(rank.clone());
        }
    }
}

impl PriorEviction {
    /// "evicted before (space by imagekeeper at ...) and pulled back 1m0s later", or for a
    /// removal by someone else "removed before (outside imagekeeper, at ...) and ...".
    pub fn describe(&self) -> String {
        let at = crate::format::format_rfc3339(self.removed_at);
        let removed = match (self.remover, self.reason) {
            (Remover::Imagekeeper, Some(reason)) => {
                format!(
                    "evicted before ({} by imagekeeper at {at})",
                    reason.as_str()
                )
            }
            _ => format!("removed before (outside imagekeeper, at {at})"),
        };
        format!(
            "{removed} and pulled back {} later",
            go_duration(self.repulled_at.since(self.removed_at))
        )
    }
}
