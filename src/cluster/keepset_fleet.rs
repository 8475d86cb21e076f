//! The fleet's count of each KeepSet, what `kubectl get keepsets` shows as READY
//! (`ready/matching`): how many Nodes the set's `nodeSelector` matches, and how many of those
//! say, in their own `KeepSetReport`, that they hold the set's current generation (ready: every
//! image present and runtime-pinned, none failed). One pure rule, [`fleet_counts`], from the
//! Nodes' labels and the reports; [`ready_sets_of_report`] reads a report's status as the
//! agents write it ([`super::report_body`]); [`changed_statuses`] is what the one writer
//! (`fleet_writer.rs`, elected by a Lease) writes into the sets' status.
//!
//! Invariants: a node counts toward a set only while its Node exists and its labels match the
//! set's selector: a report left by a node that no longer matches, or whose Node is gone,
//! counts for nothing; a report's entry counts as ready only for the generation it names (a
//! set changed since is not ready there until the node reports the new one); an entry that
//! says expired is not ready; Ready never exceeds Matching.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde_json::Value;

use super::keepsets::KeepSetStatus;
use super::selects;

/// One set's count across the fleet.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FleetCount {
    /// The Nodes whose labels the set's selector matches.
    pub matching: u32,
    /// Of those, the ones whose report says the set's current generation ready.
    pub ready: u32,
}

/// Each set's count: `sets` by name (their selectors and generations), `nodes` by name (their
/// labels), and for each node that reported, the sets its report says ready (with the
/// generation it held).
pub fn fleet_counts(
    sets: &BTreeMap<String, (LabelSelector, i64)>,
    nodes: &BTreeMap<String, BTreeMap<String, String>>,
    ready: &BTreeMap<String, BTreeMap<String, i64>>,
) -> BTreeMap<String, FleetCount> {
    sets.iter()
        .map(|(set, (selector, generation))| {
            let mut count = FleetCount::default();
            for (node, labels) in nodes {
                if !selects(selector, labels) {
                    continue;
                }
                count.matching = count.matching.saturating_add(1);
                if ready
                    .get(node)
                    .and_then(|sets| sets.get(set))
                    .is_some_and(|held| held == generation)
                {
                    count.ready = count.ready.saturating_add(1);
                }
            }
            (set.clone(), count)
        })
        .collect()
}

/// The sets a KeepSetReport's `status` says ready (and not expired), each with the generation
/// the node held; an entry without a generation holds none.
pub fn ready_sets_of_report(status: &Value) -> BTreeMap<String, i64> {
    status["keepSets"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|entry| entry["ready"] == true && entry["expired"] != true)
        .filter_map(|entry| {
            Some((
                entry["name"].as_str()?.to_owned(),
                entry["generation"].as_i64()?,
            ))
        })
        .collect()
}

/// A set's status for `count`, with its workloads' images and the workloads not read.
pub fn status_of(
    count: FleetCount,
    workload_images: Vec<String>,
    unresolved: Vec<String>,
) -> KeepSetStatus {
    KeepSetStatus {
        matching: count.matching,
        ready: count.ready,
        nodes: format!("{}/{}", count.ready, count.matching),
        workload_images,
        unresolved,
    }
}

/// The statuses to write: each set whose `current` status (as last read) differs from the
/// `desired` one, by name.
pub fn changed_statuses(
    current: &BTreeMap<String, Option<KeepSetStatus>>,
    desired: BTreeMap<String, KeepSetStatus>,
) -> Vec<(String, KeepSetStatus)> {
    desired
        .into_iter()
        .filter(|(name, status)| {
            current
                .get(name)
                .is_none_or(|now| now.as_ref() != Some(status))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    use serde_json::json;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn gpu_selector() -> LabelSelector {
        LabelSelector {
            match_labels: Some(labels(&[("pool", "gpu")])),
            ..LabelSelector::default()
        }
    }

    fn not_edge_selector() -> LabelSelector {
        LabelSelector {
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "zone".into(),
                operator: "NotIn".into(),
                values: Some(vec!["edge".into()]),
            }]),
            ..LabelSelector::default()
        }
    }

    fn held(pairs: &[(&str, i64)]) -> BTreeMap<String, i64> {
        pairs.iter().map(|(k, g)| ((*k).to_owned(), *g)).collect()
    }

    #[test]
    fn a_set_counts_the_nodes_it_selects_and_of_those_the_ones_reporting_its_generation_ready() {
        let nowhere = LabelSelector {
            match_labels: Some(labels(&[("pool", "none")])),
            ..LabelSelector::default()
        };
        let sets: BTreeMap<String, (LabelSelector, i64)> = [
            ("gpu-rollout".to_owned(), (gpu_selector(), 1)),
            ("everywhere".to_owned(), (LabelSelector::default(), 1)),
            ("not-edge".to_owned(), (not_edge_selector(), 1)),
            ("nowhere".to_owned(), (nowhere, 1)),
            // Changed since gpu-2 reported it: generation 3 is not held there yet.
            ("moved".to_owned(), (gpu_selector(), 3)),
        ]
        .into();
        let nodes: BTreeMap<String, BTreeMap<String, String>> = [
            ("gpu-1".to_owned(), labels(&[("pool", "gpu")])),
            (
                "gpu-2".to_owned(),
                labels(&[("pool", "gpu"), ("zone", "edge")]),
            ),
            ("cpu-1".to_owned(), labels(&[("pool", "cpu")])),
        ]
        .into();
        let ready: BTreeMap<String, BTreeMap<String, i64>> = [
            (
                "gpu-1".to_owned(),
                held(&[("gpu-rollout", 1), ("everywhere", 1), ("moved", 3)]),
            ),
            ("gpu-2".to_owned(), held(&[("moved", 2)])),
            // It reports a set that no longer selects it (its labels changed): not counted.
            (
                "cpu-1".to_owned(),
                held(&[("gpu-rollout", 1), ("not-edge", 1)]),
            ),
            // A node whose Node is gone: its report counts for nothing.
            ("gone-1".to_owned(), held(&[("everywhere", 1)])),
        ]
        .into();
        let counts = fleet_counts(&sets, &nodes, &ready);
        // (set, matching, ready)
        let cases = [
            ("gpu-rollout", 2, 1),
            ("everywhere", 3, 1),
            ("not-edge", 2, 1),
            ("nowhere", 0, 0),
            ("moved", 2, 1),
        ];
        for (set, matching, ready) in cases {
            assert_eq!(
                counts[set],
                FleetCount { matching, ready },
                "{set}: {counts:?}"
            );
        }
        assert!(counts.values().all(|c| c.ready <= c.matching));
    }

    #[test]
    fn a_report_says_a_set_ready_only_when_its_entry_is_ready_not_expired_and_has_a_generation() {
        let status = json!({
            "node": "gpu-1",
            "keepSets": [
                {"name": "held", "generation": 2, "ready": true, "expired": false},
                {"name": "pulling", "generation": 1, "ready": false, "expired": false},
                {"name": "over", "generation": 1, "ready": true, "expired": true},
                {"name": "no-generation", "ready": true},
                {"generation": 1, "ready": true},
            ],
        });
        let ready = ready_sets_of_report(&status);
        assert_eq!(ready, held(&[("held", 2)]), "{status}");
        assert!(ready_sets_of_report(&Value::Null).is_empty());
    }

    #[test]
    fn only_a_set_whose_status_changed_is_written_and_its_nodes_column_reads_ready_over_matching() {
        let count = |matching, ready| FleetCount { matching, ready };
        let images = |names: &[&str]| names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>();
        let current: BTreeMap<String, Option<KeepSetStatus>> = [
            (
                "same".to_owned(),
                Some(status_of(count(2, 1), images(&["a:1"]), vec![])),
            ),
            (
                "grew".to_owned(),
                Some(status_of(count(3, 2), vec![], vec![])),
            ),
            (
                "moved".to_owned(),
                Some(status_of(count(1, 1), images(&["a:1"]), vec![])),
            ),
            ("new".to_owned(), None),
        ]
        .into();
        let desired: BTreeMap<String, KeepSetStatus> = [
            (
                "same".to_owned(),
                status_of(count(2, 1), images(&["a:1"]), vec![]),
            ),
            ("grew".to_owned(), status_of(count(3, 3), vec![], vec![])),
            // Its workload's template moved to a:2: the count alone is unchanged.
            (
                "moved".to_owned(),
                status_of(count(1, 1), images(&["a:2"]), vec![]),
            ),
            (
                "new".to_owned(),
                status_of(count(1, 0), vec![], images(&["Deployment x/y: not found"])),
            ),
        ]
        .into();
        let written = changed_statuses(&current, desired);
        let names: Vec<&str> = written.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["grew", "moved", "new"]);
        assert_eq!(written[0].1.nodes, "3/3");
        assert_eq!(written[1].1.workload_images, ["a:2"]);
        assert_eq!(written[2].1.nodes, "0/1");
        assert_eq!((written[2].1.ready, written[2].1.matching), (0, 1));
    }

    #[test]
    fn the_agents_own_report_body_reads_back_as_the_sets_it_says_ready() {
        use crate::gc::KeepSetReport;
        let mut reports = BTreeMap::new();
        reports.insert(
            "held".to_owned(),
            KeepSetReport {
                generation: 4,
                images: 1,
                present: 1,
                pinned: 1,
                ..KeepSetReport::default()
            },
        );
        reports.insert(
            "pulling".to_owned(),
            KeepSetReport {
                images: 2,
                present: 1,
                pinned: 1,
                ..KeepSetReport::default()
            },
        );
        let body = super::super::report_body("gpu-1", &reports);
        assert_eq!(
            ready_sets_of_report(&body["status"]),
            held(&[("held", 4)]),
            "{body}"
        );
    }
}
