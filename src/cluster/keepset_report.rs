//! This node's report of the KeepSets selecting it, published as one cluster-scoped
//! `KeepSetReport` object named after the node (`imagekeeper.io/v1alpha1`, the chart's CRD),
//! written by server-side apply with this node's own field manager
//! (`imagekeeper/<node>`): per set, its mode, generation, images, present, runtime-pinned,
//! failed (with the first reasons), bytes, ready; and the node's totals for `kubectl get
//! keepsetreports`.
//!
//! Why one object per node and not the KeepSet's own status: every node watches every
//! KeepSet, so a status each node wrote into the set would reach every node's watch (n nodes
//! writing one set: n² events of an object growing with n); a node's own object is watched by
//! no agent, and its writes cost one request each, whatever the fleet's size.
//!
//! A failure new since the last report (a set's image not pulled, with the registry's reason)
//! is also a Warning Event regarding the KeepSet (reason `KeepSetImageFailed`, the node and the
//! image in its note), at most [`MAX_REPORTED_FAILURES`] a report; `kubectl describe keepset`
//! shows them.
//!
//! Invariants: one apply per change of the reports, at most one a [`MIN_INTERVAL`] (changes
//! between are one); a refused apply (RBAC, an API server away, the CRD missing) is logged once
//! per kind of failure and tried again after [`RETRY_AFTER`], never touching the node's pins.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};

use kube::api::{ApiResource, DynamicObject, Patch, PatchParams};
use kube::{Api, Client};
use serde_json::{Value, json};
use tracing::{info, warn};

use crate::gc::{KeepSetReport, MAX_REPORTED_FAILURES, NodeKeepSets};

use super::keepsets::{GROUP, VERSION};

/// The least time between two applies of the report.
pub const MIN_INTERVAL: Duration = Duration::from_secs(1);
/// How long after a refused apply it is tried again.
pub const RETRY_AFTER: Duration = Duration::from_secs(30);

/// The report object's body for server-side apply.
pub fn report_body(node: &str, reports: &BTreeMap<String, KeepSetReport>) -> Value {
    let sets: Vec<Value> = reports
        .iter()
        .map(|(name, r)| {
            json!({
                "name": name,
                "mode": r.mode.as_str(),
                "generation": r.generation,
                "ready": r.ready(),
                "expired": r.expired,
                "images": r.images,
                "present": r.present,
                "pinned": r.pinned,
                "failed": r.failed,
                "bytes": r.bytes,
                "failures": r.failures.iter().map(|(image, message)| json!({
                    "image": image,
                    "message": message,
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    let ready = reports.values().filter(|r| r.ready()).count();
    let failed = reports.values().filter(|r| r.failed > 0).count();
    json!({
        "apiVersion": format!("{GROUP}/{VERSION}"),
        "kind": "KeepSetReport",
        "metadata": { "name": node },
        "status": {
            "node": node,
            "sets": reports.len(),
            "ready": ready,
            "failing": failed,
            "keepSets": sets,
        },
    })
}

/// The KeepSetReports' resource (the chart's CRD).
pub(super) fn report_resource() -> ApiResource {
    ApiResource {
        group: GROUP.to_owned(),
        version: VERSION.to_owned(),
        api_version: format!("{GROUP}/{VERSION}"),
        kind: "KeepSetReport".to_owned(),
        plural: "keepsetreports".to_owned(),
    }
}

/// Publishes `handle`'s reports as `node`'s KeepSetReport at each change, until the task is
/// dropped.
pub async fn publish_keep_set_reports(client: Client, node: String, handle: NodeKeepSets) {
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &report_resource());
    let recorder = Recorder::new(
        client,
        Reporter {
            controller: "imagekeeper".into(),
            instance: Some(node.chars().take(128).collect()),
        },
    );
    let mut told: BTreeSet<(String, String, String)> = BTreeSet::new();
    let params = PatchParams::apply(&format!("imagekeeper/{node}")).force();
    let mut reports = handle.reports();
    let mut failing: Option<String> = None;
    // The first report comes with the first keep-set cycle.
    if reports.changed().await.is_err() {
        return;
    }
    loop {
        let current = reports.borrow_and_update().clone();
        let body = report_body(&node, &current);
        told = tell_new_failures(&recorder, &node, &current, told).await;
        match api.patch(&node, &params, &Patch::Apply(&body)).await {
            Ok(_) => {
                if failing.take().is_some() {
                    info!(node, "Publishing this node's KeepSetReport again");
                }
            }
            Err(e) => {
                let kind = failure_kind(&e);
                if failing.as_deref() != Some(kind.as_str()) {
                    warn!(node, error = %e, "Cannot publish this node's KeepSetReport ({kind}); the node's pins are unchanged, trying again");
                    failing = Some(kind);
                }
                tokio::time::sleep(RETRY_AFTER).await;
                continue;
            }
        }
        tokio::time::sleep(MIN_INTERVAL).await;
        if reports.changed().await.is_err() {
            return;
        }
    }
}

/// Publishes a Warning Event regarding each KeepSet for each of its failures in `reports` not
/// in `told` (at most [`MAX_REPORTED_FAILURES`] at once); returns the failures now told (a
/// failure that cleared and comes back is told again). A refused Event is logged, not retried.
async fn tell_new_failures(
    recorder: &Recorder,
    node: &str,
    reports: &BTreeMap<String, KeepSetReport>,
    told: BTreeSet<(String, String, String)>,
) -> BTreeSet<(String, String, String)> {
    let now: BTreeSet<(String, String, String)> = reports
        .iter()
        .flat_map(|(set, r)| {
            r.failures
                .iter()
                .map(move |(image, message)| (set.clone(), image.clone(), message.clone()))
        })
        .collect();
    for (set, image, message) in now.difference(&told).take(MAX_REPORTED_FAILURES) {
        let reference = ObjectReference {
            api_version: Some(format!("{GROUP}/{VERSION}")),
            kind: Some("KeepSet".into()),
            name: Some(set.clone()),
            ..ObjectReference::default()
        };
        let mut note = format!("node {node}: {image}: {message}");
        if note.len() > 1024 {
            let mut end = 1024;
            while !note.is_char_boundary(end) {
                end -= 1;
            }
            note.truncate(end);
        }
        let event = Event {
            type_: EventType::Warning,
            reason: "KeepSetImageFailed".into(),
            note: Some(note),
            action: "Pull".into(),
            secondary: None,
        };
        if let Err(e) = recorder.publish(&event, &reference).await {
            warn!(keep_set = set.as_str(), error = %e, "Cannot publish a KeepSet's Event");
        }
    }
    now
}

/// The kind of an apply's failure, for logging once per kind: the API server's status code and
/// reason, or the transport's.
fn failure_kind(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) => format!("{} {}", status.code, status.reason),
        _ => "unreachable".to_owned(),
    }
}
