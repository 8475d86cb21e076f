//! What keeps an image from one cycle's walks: the keep rules that come from outside its
//! record (imagekeeper's protections, the kubelet's pull intents and fresh pulls, containers
//! using it, pulls in flight, the warm set), then the record's own (`evict::record_verdict`).
//!
//! Invariant: [`Keeps::kept_by`] is the one order of the keep rules; the manager's skip
//! counts, its protected set and explain's verdicts all read it.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::model::{ImageRecord, RecordKey, UnixNanos};

use crate::gc::evict::{Verdict, protection_verdict, record_verdict};
use crate::gc::protect::Protections;

/// The keep sets the agent's own sources give a cycle, beside the runtime's view, the
/// kubelet's records and the protections: read at the cycle's detect (and by the dry run)
/// through `ImageGcManager::keep_sets`; an offline explain gives those it can know.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeepSets {
    /// The listed images a pull through imagekeeper is fetching.
    pub pulling: BTreeSet<RecordKey>,
    /// The listed images a warm set entry in force keeps, each with the first such entry's
    /// origin (`warm[1] in /etc/imagekeeper.toml`, `KeepSet/gpu`, `history`, ...).
    pub warm: BTreeMap<RecordKey, String>,
    /// The listed images a pod bound to this node names (`BoundPods`), each with what needs
    /// it: the pod (`namespace/name`) or the DaemonSet whose template it is
    /// (`DaemonSet namespace/name`).
    pub needed_by_pods: BTreeMap<RecordKey, String>,
}

/// The keys a cycle keeps whatever its walks need, by rule.
#[derive(Clone, Copy, Debug)]
pub struct Keeps<'a> {
    /// Images a container uses (at the cycle's detect; explain: at the last detect).
    pub in_use: &'a BTreeSet<RecordKey>,
    /// The agent's own sources' sets.
    pub sets: &'a KeepSets,
    /// Images a kubelet pull intent names.
    pub kubelet_pulling: &'a BTreeSet<RecordKey>,
    /// Images the kubelet pulled less than MinAge ago.
    pub kubelet_just_pulled: &'a BTreeSet<RecordKey>,
    /// Pins and irreplaceable images.
    pub protections: &'a Protections,
}

impl Keeps<'_> {
    /// The first rule from outside the record that keeps `key`, as the verdict the walks give
    /// it: protections first (they keep the image whatever runs), then the kubelet pulling
    /// it, in use, a bound pod naming it, the kubelet's fresh pull, a pull in flight, the warm
    /// set.
    pub fn kept_by(&self, key: &RecordKey) -> Option<Verdict> {
        if let Some(protection) = self.protections.get(key) {
            Some(protection_verdict(protection))
        } else if self.kubelet_pulling.contains(key) {
            Some(Verdict::KubeletPulling)
        } else if self.in_use.contains(key) {
            Some(Verdict::InUse)
        } else if self.sets.needed_by_pods.contains_key(key) {
            Some(Verdict::NeededByPod)
        } else if self.kubelet_just_pulled.contains(key) {
            Some(Verdict::KubeletJustPulled)
        } else if self.sets.pulling.contains(key) {
            Some(Verdict::PullInProgress)
        } else if self.sets.warm.contains_key(key) {
            Some(Verdict::Warm)
        } else {
            None
        }
    }

    /// The walk's verdict on one record at `free_time`: [`Keeps::kept_by`], else the record's
    /// own rules (pinned, used too recently, younger than MinAge), else eligible.
    pub fn verdict(
        &self,
        key: &RecordKey,
        record: &ImageRecord,
        free_time: UnixNanos,
        min_age: Duration,
    ) -> Verdict {
        self.kept_by(key)
            .unwrap_or_else(|| record_verdict(record, free_time, min_age))
    }

    /// Every key a rule of [`Keeps::kept_by`] keeps.
    pub fn protected(&self) -> BTreeSet<RecordKey> {
        self.in_use
            .iter()
            .chain(&self.sets.pulling)
            .chain(self.kubelet_pulling)
            .chain(self.kubelet_just_pulled)
            .chain(self.sets.warm.keys())
            .chain(self.sets.needed_by_pods.keys())
            .chain(self.protections.keys())
            .cloned()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ImageId;

    fn key(n: u8) -> RecordKey {
        crate::model::RuntimeImage {
            id: ImageId::new(format!("sha256:{n:064x}")),
            ..Default::default()
        }
        .record_key()
    }

    #[test]
    fn a_key_kept_by_several_rules_is_kept_by_the_first_in_order_and_a_bound_pod_keeps_its_images()
    {
        let set = |keys: &[u8]| keys.iter().map(|n| key(*n)).collect::<BTreeSet<_>>();
        // Key 1 is in every set; key 2 in all but in use and the kubelet's intents; key 3
        // only warm; key 4 in none; keys 5 to 8 in one set each.
        let in_use = set(&[1]);
        let kubelet_pulling = set(&[1, 5]);
        let just_pulled = set(&[1, 2, 6]);
        let sets = KeepSets {
            pulling: set(&[1, 2, 7]),
            warm: set(&[1, 2, 3])
                .into_iter()
                .map(|k| (k, "warm[0]".to_owned()))
                .collect(),
            needed_by_pods: set(&[1, 2, 8])
                .into_iter()
                .map(|k| (k, "ns/pod".to_owned()))
                .collect(),
        };
        let protections = Protections::default();
        let keeps = Keeps {
            in_use: &in_use,
            sets: &sets,
            kubelet_pulling: &kubelet_pulling,
            kubelet_just_pulled: &just_pulled,
            protections: &protections,
        };
        let cases = [
            (1, Some(Verdict::KubeletPulling)),
            (2, Some(Verdict::NeededByPod)),
            (3, Some(Verdict::Warm)),
            (4, None),
            (5, Some(Verdict::KubeletPulling)),
            (6, Some(Verdict::KubeletJustPulled)),
            (7, Some(Verdict::PullInProgress)),
            (8, Some(Verdict::NeededByPod)),
        ];
        for (n, want) in cases {
            assert_eq!(keeps.kept_by(&key(n)), want, "key {n}");
        }
        assert_eq!(keeps.protected().len(), 7);
        let record = ImageRecord {
            first_detected: UnixNanos(1),
            last_used: UnixNanos::NEVER,
            size: 1,
            pinned: true,
        };
        assert_eq!(
            keeps.verdict(&key(4), &record, UnixNanos(10), Duration::ZERO),
            Verdict::Pinned
        );
    }
}
