//! The cluster signals' share of the disk (`clusterSignalsKeepShare`, issue 55): the images the
//! signals keep (a pod bound to this node, a DaemonSet's template, a CronJob run within the
//! lead) hold at most that share of the image filesystem's capacity. When the set the cluster
//! needs does not fit, the images past the share lose the signals' keep and fall back to the
//! GC's order, and the agent says so (a log line, a metric, a Warning Event on the Node,
//! `doctor`).
//!
//! The rule ([`within_share`]): an image a container uses is kept by that use whatever the share
//! (it is neither counted nor left out). The others are taken pods' and DaemonSets' first (the
//! needed-now set), then CronJobs' (needed at their run), each in image order, and kept while
//! their sizes fit within the share; one that does not fit is left to the order and the next
//! ones are still tried. A share of 100 % or an unknown capacity (0: not read yet) keeps every
//! one.
//!
//! Invariants: pure (no clock, no runtime); the kept and the left partition the needed images
//! that no container uses; the kept ones' bytes never exceed the budget.

use std::collections::{BTreeMap, BTreeSet};

use crate::model::RecordKey;

/// The default share, in percent of the image filesystem's capacity.
pub const DEFAULT_KEEP_SHARE_PERCENT: u8 = 50;

/// What the share left out at a detect: the images the signals need that it does not keep.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeepsOverShare {
    /// The share in force, in percent.
    pub share_percent: u8,
    /// The share in bytes (the capacity's share).
    pub budget: u64,
    /// The bytes the signals' keeps hold within it.
    pub held: u64,
    /// The images left to the order, with what needs each and its size, in the rule's order.
    pub left: Vec<(RecordKey, String, u64)>,
}

impl KeepsOverShare {
    /// The bytes left to the order.
    pub fn left_bytes(&self) -> u64 {
        self.left
            .iter()
            .fold(0u64, |acc, (_, _, size)| acc.saturating_add(*size))
    }

    /// Its figures, for the metrics, the admin answer and doctor.
    pub fn sample(&self) -> OverShareSample {
        OverShareSample {
            share_percent: self.share_percent,
            images: self.left.len() as u64,
            bytes: self.left_bytes(),
        }
    }
}

/// What the keep share left out at the last detect, in figures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OverShareSample {
    /// The share in force, in percent.
    pub share_percent: u8,
    /// The images the signals need that the share left to the order.
    pub images: u64,
    /// Their bytes.
    pub bytes: u64,
}

/// The images the signals keep within `share_percent` of `capacity`, and what the share left
/// out (`None` when it left nothing). `needed` maps each image to what needs it (`CronJob ...`
/// for a CronJob run; a pod or DaemonSet otherwise) and its size.
pub fn within_share(
    needed: BTreeMap<RecordKey, (String, u64)>,
    in_use: &BTreeSet<RecordKey>,
    capacity: u64,
    share_percent: u8,
) -> (BTreeMap<RecordKey, String>, Option<KeepsOverShare>) {
    if share_percent >= 100 || capacity == 0 {
        let kept = needed.into_iter().map(|(k, (s, _))| (k, s)).collect();
        return (kept, None);
    }
    let budget =
        u64::try_from(u128::from(capacity) * u128::from(share_percent) / 100).unwrap_or(u64::MAX);
    let (pods, cronjobs): (Vec<_>, Vec<_>) = needed
        .into_iter()
        .partition(|(_, (source, _))| !source.starts_with("CronJob "));
    let mut kept = BTreeMap::new();
    let mut held = 0u64;
    let mut left = Vec::new();
    for (key, (source, size)) in pods.into_iter().chain(cronjobs) {
        if in_use.contains(&key) {
            kept.insert(key, source);
            continue;
        }
        match held.checked_add(size).filter(|total| *total <= budget) {
            Some(total) => {
                held = total;
                kept.insert(key, source);
            }
            None => left.push((key, source, size)),
        }
    }
    let over = (!left.is_empty()).then_some(KeepsOverShare {
        share_percent,
        budget,
        held,
        left,
    });
    (kept, over)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ImageId;

    fn key(id: &str) -> RecordKey {
        RecordKey {
            image_id: ImageId(id.to_owned()),
            runtime_handler: String::new(),
        }
    }

    fn needed(entries: &[(&str, &str, u64)]) -> BTreeMap<RecordKey, (String, u64)> {
        entries
            .iter()
            .map(|(id, source, size)| (key(id), ((*source).to_owned(), *size)))
            .collect()
    }

    /// Each case: its name, the needed images (id, what needs it, size), those in use, the
    /// capacity, the share, the images kept and those left.
    type Case = (
        &'static str,
        &'static [(&'static str, &'static str, u64)],
        &'static [&'static str],
        u64,
        u8,
        &'static [&'static str],
        &'static [&'static str],
    );

    const CASES: &[Case] = &[
        (
            "all fit",
            &[("a", "ns/p", 100), ("b", "CronJob ns/c", 200)],
            &[],
            1_000,
            50,
            &["a", "b"],
            &[],
        ),
        (
            "a CronJob's image goes before a pod's: pods first",
            &[("a", "CronJob ns/c", 300), ("b", "ns/p", 400)],
            &[],
            1_000,
            50,
            &["b"],
            &["a"],
        ),
        (
            "one too large is left, a smaller one after it still kept",
            &[("a", "ns/p", 600), ("b", "ns/p", 100)],
            &[],
            1_000,
            50,
            &["b"],
            &["a"],
        ),
        (
            "exactly the budget is within it",
            &[("a", "ns/p", 250), ("b", "DaemonSet ns/d", 250)],
            &[],
            1_000,
            50,
            &["a", "b"],
            &[],
        ),
        (
            "an image in use is kept and not counted",
            &[("a", "ns/p", 900), ("b", "ns/p", 500)],
            &["a"],
            1_000,
            50,
            &["a", "b"],
            &[],
        ),
        (
            "share 100 keeps all",
            &[("a", "ns/p", 900), ("b", "ns/p", 900)],
            &[],
            1_000,
            100,
            &["a", "b"],
            &[],
        ),
        (
            "capacity unknown keeps all",
            &[("a", "ns/p", 900)],
            &[],
            0,
            10,
            &["a"],
            &[],
        ),
    ];

    /// The share's rule over a 1,000-byte disk: pods' and DaemonSets' images first, then
    /// CronJobs', each in image order, kept while they fit; an image in use is kept and not
    /// counted; 100 % or an unknown capacity keeps all.
    #[test]
    fn the_signals_keep_what_fits_in_the_share_pods_first_and_leave_the_rest_to_the_order() {
        let cases = CASES;
        for (name, entries, in_use, capacity, share, want_kept, want_left) in cases {
            let in_use: BTreeSet<RecordKey> = in_use.iter().map(|id| key(id)).collect();
            let (kept, over) = within_share(needed(entries), &in_use, *capacity, *share);
            let kept: Vec<&str> = kept.keys().map(|k| k.image_id.0.as_str()).collect();
            assert_eq!(kept, *want_kept, "{name}");
            let left: Vec<&str> = over
                .as_ref()
                .map(|o| {
                    o.left
                        .iter()
                        .map(|(k, _, _)| k.image_id.0.as_str())
                        .collect()
                })
                .unwrap_or_default();
            assert_eq!(left, *want_left, "{name}");
            if let Some(over) = over {
                assert!(over.held <= over.budget, "{name}");
                assert_eq!(over.budget, capacity * u64::from(*share) / 100, "{name}");
            }
        }
    }
}
