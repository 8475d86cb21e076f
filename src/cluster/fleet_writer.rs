//! The one writer of the fleet's KeepSet counts (`keepSets`): every agent is a candidate for
//! the coordination.k8s.io `Lease` [`LEASE_NAME`] in its own namespace (the chart's), and the
//! one holding it, every [`COUNT_INTERVAL`], lists the KeepSets, the Nodes' labels and the
//! KeepSetReports, counts each set ([`super::fleet_counts`]), reads the workloads each set
//! names (`spec.workloads`: their pod templates' images, which every agent then reads from the
//! set's status, so n agents need no read of their own) and writes the statuses that changed
//! into the sets' `status` subresource by server-side apply under one field manager
//! ([`FIELD_MANAGER`], so the next holder owns the same fields). The Lease's rule is
//! [`super::lease_step`].
//!
//! Why one writer: n agents each writing every set's status would be n writes a round of an
//! object every agent watches; one writer costs a few lists a round and one write per set whose
//! count changed, whatever the fleet's size.
//!
//! Invariants: an agent acts as the writer only while its last successful acquire or renewal
//! is younger than the Lease's duration by its own clock (an API server away ends it), so two
//! writers overlap at most by the clocks' skew, and they would write the same rule over the
//! same objects; the lists are paged ([`PAGE`] objects an answer); a failure is logged once
//! per kind and the round tried again at the next interval, never touching the node's pins.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, MicroTime, ObjectMeta};
use kube::api::{DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde::de::DeserializeOwned;
use serde_json::json;
use tracing::{info, warn};

use crate::clock::Clock;
use crate::model::UnixNanos;

use super::client::api_failure;
use super::keepset_report::report_resource;
use super::keepsets::{GROUP, KeepSetObject, KeepSetStatus, VERSION, WorkloadRef};
use super::lease::{LeaseStep, LeaseView, lease_step};
use super::{changed_statuses, fleet_counts, ready_sets_of_report, status_of};

/// The Lease the candidates share, in the agent's namespace.
pub const LEASE_NAME: &str = "imagekeeper-keepset-counts";
/// The Lease's duration: a holder silent this long is replaced.
pub const LEASE_DURATION_SECONDS: i32 = 30;
/// How often each candidate reads the Lease, and the holder counts.
pub const COUNT_INTERVAL: Duration = Duration::from_secs(10);
/// The field manager of the sets' status.
pub const FIELD_MANAGER: &str = "imagekeeper/fleet-count";
/// The most objects one list answer holds.
pub const PAGE: u32 = 500;
/// The most workloads one set names (the CRD's `maxItems`).
pub const MAX_WORKLOADS: usize = 64;

/// Runs `identity`'s candidacy, and the counting while it holds the Lease, until the task is
/// dropped.
pub async fn publish_fleet_counts(client: Client, identity: String, clock: Arc<dyn Clock>) {
    let namespace = client.default_namespace().to_owned();
    let leases: Api<Lease> = Api::namespaced(client.clone(), &namespace);
    let mut renewed: Option<UnixNanos> = None;
    let mut writing = false;
    let mut failing: Option<String> = None;
    loop {
        let now = clock.now();
        let round = match elect(&leases, &identity, now).await {
            Ok(held) => {
                renewed = held;
                Ok(())
            }
            Err(e) => Err(format!(
                "the Lease {namespace}/{LEASE_NAME}: {}",
                api_failure(&e)
            )),
        };
        let lease_nanos = i64::from(LEASE_DURATION_SECONDS).saturating_mul(1_000_000_000);
        let writer = renewed.is_some_and(|at| now.0.saturating_sub(at.0) < lease_nanos);
        if writer != writing {
            if writer {
                info!(
                    identity,
                    "Counting the KeepSets across the fleet (this agent holds the Lease)"
                );
            } else {
                info!(
                    identity,
                    "Another agent counts the KeepSets across the fleet"
                );
            }
            writing = writer;
        }
        let round = match (round, writer) {
            (Ok(()), true) => count_round(&client)
                .await
                .map(|_| ())
                .map_err(|e| format!("the counts: {}", api_failure(&e))),
            (round, _) => round,
        };
        match round {
            Ok(()) => {
                if failing.take().is_some() {
                    info!(identity, "The fleet's KeepSet counts work again");
                }
            }
            Err(why) => {
                if failing.as_deref() != Some(why.as_str()) {
                    warn!(
                        identity,
                        "The fleet's KeepSet counts failed at {why}; the node's pins are unchanged, trying again"
                    );
                    failing = Some(why);
                }
            }
        }
        tokio::time::sleep(COUNT_INTERVAL).await;
    }
}

/// One candidacy step: reads the Lease and acquires or renews it when [`lease_step`] says so;
/// the time of the holding renewal when `me` holds it (`None`: another does, or won the race).
async fn elect(
    leases: &Api<Lease>,
    me: &str,
    now: UnixNanos,
) -> Result<Option<UnixNanos>, kube::Error> {
    let lease = leases.get_opt(LEASE_NAME).await?;
    let view = lease.as_ref().map(view_of);
    let step = lease_step(view.as_ref(), me, now, i64::from(LEASE_DURATION_SECONDS));
    match step {
        LeaseStep::Follow => return Ok(None),
        LeaseStep::Hold => return Ok(view.and_then(|v| v.renewed)),
        LeaseStep::Acquire | LeaseStep::Renew => {}
    }
    let time = MicroTime(
        jiff::Timestamp::from_nanosecond(i128::from(now.0)).unwrap_or(jiff::Timestamp::UNIX_EPOCH),
    );
    let mut spec = lease
        .as_ref()
        .and_then(|l| l.spec.clone())
        .unwrap_or_default();
    if step == LeaseStep::Acquire {
        let taken_over = spec
            .holder_identity
            .as_deref()
            .is_some_and(|holder| !holder.is_empty() && holder != me);
        spec.acquire_time = Some(time.clone());
        spec.lease_transitions = Some(
            spec.lease_transitions
                .unwrap_or(0)
                .saturating_add(i32::from(taken_over)),
        );
    }
    spec.holder_identity = Some(me.to_owned());
    spec.lease_duration_seconds = Some(LEASE_DURATION_SECONDS);
    spec.renew_time = Some(time);
    let written = match lease {
        None => {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(LEASE_NAME.to_owned()),
                    ..ObjectMeta::default()
                },
                spec: Some(spec),
            };
            leases.create(&PostParams::default(), &lease).await
        }
        // The read's resourceVersion rides along: of two racing candidates one wins.
        Some(mut lease) => {
            lease.spec = Some(spec);
            leases
                .replace(LEASE_NAME, &PostParams::default(), &lease)
                .await
        }
    };
    match written {
        Ok(_) => Ok(Some(now)),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(None),
        Err(e) => Err(e),
    }
}

/// The Lease as [`lease_step`] reads it.
fn view_of(lease: &Lease) -> LeaseView {
    let spec = lease.spec.clone().unwrap_or_default();
    LeaseView {
        holder: spec.holder_identity,
        renewed: spec
            .renew_time
            .and_then(|t| i64::try_from(t.0.as_nanosecond()).ok())
            .map(UnixNanos),
        duration_seconds: spec.lease_duration_seconds.map(i64::from),
    }
}

/// One count: lists, counts, writes the changed statuses; how many were written.
async fn count_round(client: &Client) -> Result<usize, kube::Error> {
    let sets_api: Api<KeepSetObject> = Api::all(client.clone());
    let sets = list_all(&sets_api).await?;
    let mut selectors: BTreeMap<String, (LabelSelector, i64)> = BTreeMap::new();
    let mut current: BTreeMap<String, Option<KeepSetStatus>> = BTreeMap::new();
    let mut workloads: BTreeMap<String, Vec<WorkloadRef>> = BTreeMap::new();
    for set in sets {
        let (Some(name), Some(selector)) = (set.metadata.name, set.spec.node_selector) else {
            continue;
        };
        let generation = set.metadata.generation.unwrap_or_default();
        selectors.insert(name.clone(), (selector, generation));
        workloads.insert(name.clone(), set.spec.workloads);
        current.insert(name, set.status);
    }
    if selectors.is_empty() {
        return Ok(0);
    }
    let nodes_api: Api<Node> = Api::all(client.clone());
    let mut nodes: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    let mut params = ListParams::default().limit(PAGE);
    loop {
        let page = nodes_api.list_metadata(&params).await?;
        for node in page.items {
            if let Some(name) = node.metadata.name {
                nodes.insert(name, node.metadata.labels.unwrap_or_default());
            }
        }
        match page.metadata.continue_ {
            Some(token) if !token.is_empty() => params = params.continue_token(&token),
            _ => break,
        }
    }
    let reports_api: Api<DynamicObject> = Api::all_with(client.clone(), &report_resource());
    let ready: BTreeMap<String, BTreeMap<String, i64>> = list_all(&reports_api)
        .await?
        .into_iter()
        .filter_map(|report| {
            let name = report.metadata.name?;
            Some((name, ready_sets_of_report(&report.data["status"])))
        })
        .collect();
    let counts = fleet_counts(&selectors, &nodes, &ready);
    let mut desired = BTreeMap::new();
    for (name, count) in counts {
        let (images, unresolved) = resolve_workloads(client, &workloads[&name]).await;
        desired.insert(name, status_of(count, images, unresolved));
    }
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let changed = changed_statuses(&current, desired);
    for (name, status) in &changed {
        let body = json!({
            "apiVersion": format!("{GROUP}/{VERSION}"),
            "kind": "KeepSet",
            "metadata": { "name": name },
            "status": status,
        });
        sets_api
            .patch_status(name, &params, &Patch::Apply(&body))
            .await?;
    }
    Ok(changed.len())
}

/// The images of `workloads`' pod templates (sorted, each once), and the workloads that
/// could not be read with why (at most [`MAX_WORKLOADS`] are read; the CRD allows no more).
async fn resolve_workloads(
    client: &Client,
    workloads: &[WorkloadRef],
) -> (Vec<String>, Vec<String>) {
    let mut images = std::collections::BTreeSet::new();
    let mut unresolved = Vec::new();
    for workload in workloads.iter().take(MAX_WORKLOADS) {
        match workload_images(client, workload).await {
            Ok(found) => images.extend(found),
            Err(why) => unresolved.push(format!("{workload}: {why}")),
        }
    }
    (images.into_iter().collect(), unresolved)
}

/// The images of one workload's pod template ([`super::spec_images`]).
async fn workload_images(client: &Client, workload: &WorkloadRef) -> Result<Vec<String>, String> {
    use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
    use k8s_openapi::api::batch::v1::{CronJob, Job};
    use k8s_openapi::api::core::v1::PodTemplateSpec;

    async fn get<K>(client: &Client, workload: &WorkloadRef) -> Result<K, String>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + DeserializeOwned
            + Debug,
        K::DynamicType: Default,
    {
        let api: Api<K> = Api::namespaced(client.clone(), &workload.namespace);
        match api.get_opt(&workload.name).await {
            Ok(Some(object)) => Ok(object),
            Ok(None) => Err("not found".to_owned()),
            Err(e) => Err(api_failure(&e)),
        }
    }
    let template: Option<PodTemplateSpec> = match workload.kind.as_str() {
        "Deployment" => Some(get::<Deployment>(client, workload).await?.spec.template),
        "StatefulSet" => Some(get::<StatefulSet>(client, workload).await?.spec.template),
        "DaemonSet" => Some(get::<DaemonSet>(client, workload).await?.spec.template),
        "ReplicaSet" => get::<ReplicaSet>(client, workload).await?.spec.template,
        "Job" => get::<Job>(client, workload).await?.spec.map(|s| s.template),
        "CronJob" => get::<CronJob>(client, workload)
            .await?
            .spec
            .job_template
            .spec
            .map(|s| s.template),
        other => return Err(format!("kind {other:?} is not carried")),
    };
    Ok(template
        .and_then(|t| t.spec)
        .map(|spec| super::spec_images(&spec))
        .unwrap_or_default())
}

/// Every object of `api`, a page at a time.
async fn list_all<K>(api: &Api<K>) -> Result<Vec<K>, kube::Error>
where
    K: Clone + DeserializeOwned + Debug,
{
    let mut all = Vec::new();
    let mut params = ListParams::default().limit(PAGE);
    loop {
        let page = api.list(&params).await?;
        all.extend(page.items);
        match page.metadata.continue_ {
            Some(token) if !token.is_empty() => params = params.continue_token(&token),
            _ => return Ok(all),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_charts_role_grants_this_lease_by_name_and_the_crd_has_the_status_it_writes() {
        let rbac = include_str!("../../deploy/helm/imagekeeper/templates/rbac.yaml");
        assert!(
            rbac.contains(&format!("resourceNames: [\"{LEASE_NAME}\"]")),
            "the chart's Role names another Lease"
        );
        let crd = include_str!("../../deploy/helm/imagekeeper/crds/keepsets.yaml");
        for field in [
            "subresources:\n        status: {}",
            "jsonPath: .status.nodes",
        ] {
            assert!(crd.contains(field), "the KeepSet CRD lacks {field:?}");
        }
        let status = serde_json::to_value(status_of(
            super::super::FleetCount {
                matching: 2,
                ready: 1,
            },
            vec!["a:1".to_owned()],
            vec!["Job x/y: not found".to_owned()],
        ))
        .expect("a status serializes");
        for field in ["matching", "ready", "nodes", "workloadImages", "unresolved"] {
            assert!(
                crd.contains(&format!("                {field}:\n")),
                "the CRD's status lacks {field}"
            );
            assert!(status.get(field).is_some(), "{status}");
        }
    }
}
