//! The cluster signals' check (issue 55): whether a running agent's watches of the API server
//! answer. With the API server away or the RBAC denying a watch, the agent runs on the last
//! set it saw (nothing is released); `doctor` says so as a conflict with what to change. So
//! it does when the images the cluster needs did not fit `clusterSignalsKeepShare` at the
//! agent's last detect (those past it are left to the GC's order).
//!
//! Invariant: asked only of a running agent (its admin socket); with `clusterSignals` off the
//! check says so and passes; with no agent answering it is not checked.

use super::{Finding, Status};
use crate::gc::{BoundPodsSample, WatchSample};

/// What `doctor` learnt of the cluster signals from the agent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClusterSignalsSeen {
    /// No agent answered on the admin socket: why.
    Unreachable(String),
    /// The agent answered: its watches, `None` when it runs none.
    Answered(Option<BoundPodsSample>),
}

const CHECK: &str = "cluster-signals";

/// The check: `enabled` is the configuration's `clusterSignals`.
pub(super) fn check_cluster_signals(enabled: bool, seen: Option<&ClusterSignalsSeen>) -> Finding {
    if !enabled {
        return Finding::ok(
            CHECK,
            "clusterSignals is off: the agent decides from the node's own knowledge".to_owned(),
        );
    }
    let sample = match seen {
        None => return not_checked("the agent was not asked".to_owned()),
        Some(ClusterSignalsSeen::Unreachable(why)) => {
            return not_checked(format!("no agent answered ({why})"));
        }
        Some(ClusterSignalsSeen::Answered(None)) => {
            return conflict(
                "clusterSignals is on but the agent runs no watch: no API server credentials, \
                 or a binary built without the kube feature (its log said which at start)"
                    .to_owned(),
                "run the agent with a service account (the chart's, clusterSignals.enabled) or a \
                 kubeconfig, from the container image (built with kube)",
            );
        }
        Some(ClusterSignalsSeen::Answered(Some(sample))) => sample,
    };
    let pods = WatchSample {
        synced: sample.synced,
        failing: sample.failing,
        errors: sample.errors,
    };
    let mut failing = Vec::new();
    if pods.failing {
        failing.push(format!("pods bound to this node ({} errors)", pods.errors));
    }
    if let Some(ds) = sample.daemonsets.filter(|d| d.watch.failing) {
        failing.push(format!("DaemonSets ({} errors)", ds.watch.errors));
    }
    for (what, watch) in [
        ("CronJobs", sample.cronjobs),
        ("ReplicaSets", sample.replicasets),
    ] {
        if let Some(watch) = watch.filter(|w| w.failing) {
            failing.push(format!("{what} ({} errors)", watch.errors));
        }
    }
    if !failing.is_empty() {
        return conflict(
            format!(
                "the watch of the {} is failing: the API server is away or the RBAC denies it; \
                 the agent keeps the last set it saw ({} pods, {} images) and retries",
                failing.join(" and the "),
                sample.pods,
                sample.images
            ),
            "check the agent's log for the error, the API server, and the ClusterRole's rules \
             (list and watch on pods, daemonsets, replicasets and cronjobs)",
        );
    }
    if let Some(over) = sample.over_share {
        return conflict(
            format!(
                "the images the cluster needs on this node do not fit clusterSignalsKeepShare \
                 ({}%): {} image(s), {}, are left to the GC's order at each detect",
                over.share_percent,
                over.images,
                crate::format::format_size(over.bytes)
            ),
            "raise clusterSignalsKeepShare, or give the image filesystem more room (the pods \
             bound to this node, their DaemonSets and the CronJobs due within the lead need \
             more than the share)",
        );
    }
    if !pods.synced {
        return not_checked(
            "the pods bound to this node are not listed yet: the agent does not know the \
             cluster's needs yet"
                .to_owned(),
        );
    }
    let daemonsets = sample.daemonsets.map_or_else(
        || "; the DaemonSets' watch has not started".to_owned(),
        |d| {
            format!(
                "; {} DaemonSets watched, {} images of their templates needed here",
                d.held, d.images
            )
        },
    );
    Finding::ok(
        CHECK,
        format!(
            "watching: {} pods bound to this node, {} images kept for them{daemonsets}",
            sample.pods, sample.images
        ),
    )
}

fn not_checked(message: String) -> Finding {
    Finding {
        check: CHECK.to_owned(),
        status: Status::NotChecked,
        message,
        fix: None,
    }
}

fn conflict(message: String, fix: &str) -> Finding {
    Finding {
        check: CHECK.to_owned(),
        status: Status::Conflict,
        message,
        fix: Some(fix.to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gc::DaemonSetsSample;

    fn sample(failing: bool, ds_failing: Option<bool>) -> BoundPodsSample {
        BoundPodsSample {
            pods: 3,
            images: 4,
            synced: true,
            failing,
            errors: u64::from(failing) * 2,
            refused: 0,
            daemonsets: ds_failing.map(|f| DaemonSetsSample {
                held: 5,
                refused: 0,
                images: 1,
                watch: WatchSample {
                    synced: true,
                    failing: f,
                    errors: u64::from(f),
                },
            }),
            cronjobs: ds_failing.map(|f| WatchSample {
                synced: true,
                failing: f,
                errors: 3,
            }),
            replicasets: None,
            over_share: None,
        }
    }

    #[test]
    fn the_check_says_how_the_watches_fare_and_a_failing_one_is_a_conflict() {
        let answered = |s| Some(ClusterSignalsSeen::Answered(s));
        let cases: [(bool, Option<ClusterSignalsSeen>, Status, &str); 9] = [
            (false, None, Status::Ok, "clusterSignals is off"),
            (true, None, Status::NotChecked, "not asked"),
            (
                true,
                Some(ClusterSignalsSeen::Unreachable("connection refused".into())),
                Status::NotChecked,
                "no agent answered (connection refused)",
            ),
            (true, answered(None), Status::Conflict, "runs no watch"),
            (
                true,
                answered(Some(sample(false, Some(false)))),
                Status::Ok,
                "watching: 3 pods bound to this node, 4 images kept for them; 5 DaemonSets",
            ),
            (
                true,
                answered(Some(sample(true, Some(false)))),
                Status::Conflict,
                "the watch of the pods bound to this node (2 errors) is failing",
            ),
            (
                true,
                answered(Some(sample(true, Some(true)))),
                Status::Conflict,
                "pods bound to this node (2 errors) and the DaemonSets (1 errors) and the CronJobs (3 errors)",
            ),
            (
                true,
                answered(Some(BoundPodsSample {
                    synced: false,
                    ..sample(false, None)
                })),
                Status::NotChecked,
                "not listed yet",
            ),
            (
                true,
                answered(Some(BoundPodsSample {
                    over_share: Some(crate::gc::OverShareSample {
                        share_percent: 50,
                        images: 2,
                        bytes: 2 * 1024 * 1024 * 1024,
                    }),
                    ..sample(false, Some(false))
                })),
                Status::Conflict,
                "do not fit clusterSignalsKeepShare (50%): 2 image(s), 2.0 GiB, are left to the GC's order",
            ),
        ];
        for (enabled, seen, status, part) in cases {
            let finding = check_cluster_signals(enabled, seen.as_ref());
            assert_eq!(finding.status, status, "{seen:?}: {}", finding.message);
            assert!(
                finding.message.contains(part),
                "{seen:?}: {}",
                finding.message
            );
            assert_eq!(finding.fix.is_some(), status == Status::Conflict);
        }
    }
}
