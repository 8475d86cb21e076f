//! The fleet's KeepSets (`keepSets`): a watch of the cluster-scoped `KeepSet` objects
//! (`imagekeeper.io/v1alpha1`, the chart's CRD) and of this node's own Node (its labels), the
//! sets whose `nodeSelector` matches the labels written to [`NodeKeepSets`] (the agent's
//! keep-set loop pins them), and this node's reports published as its `KeepSetReport` object
//! (`report.rs`).
//!
//! A set's lifetime is `spec.until` (RFC 3339), or its creation time plus `spec.duration` (a Go
//! duration), or none. The API server refuses a set that gives both, or a mode other than
//! `pin` or `warm` (the CRD's schema and CEL rules); a set that still cannot be read here (a
//! time that does not parse) is not held, logged once.
//!
//! Invariants: only reads (list and watch) of KeepSets and of this one Node (by the field
//! selector `metadata.name`); nothing is written to [`NodeKeepSets`] before both the sets'
//! first list and the Node's labels came, so the node's pins stay as they are until the
//! cluster's knowledge is whole; a relist replaces the set once complete.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use super::reach::ApiReach;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client};
use serde::{Deserialize, Serialize};
use tracing::{info, warn};

use crate::gc::{KeepSet, KeepSetMode, NodeKeepSets};
use crate::model::UnixNanos;

/// The API group of imagekeeper's custom resources.
pub const GROUP: &str = "imagekeeper.io";
/// Their version.
pub const VERSION: &str = "v1alpha1";

/// A `KeepSet` as the agent reads it (the fields it uses; the API server keeps the rest).
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct KeepSetObject {
    /// The object's metadata.
    pub metadata: ObjectMeta,
    /// What the set asks.
    #[serde(default)]
    pub spec: KeepSetSpec,
    /// The fleet's count, as its elected writer last published it (`keepset_fleet.rs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<KeepSetStatus>,
}

/// A KeepSet's status: how many Nodes its selector matches and how many of those report it
/// ready, and the two as `ready/matching` (the READY column of `kubectl get keepsets`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct KeepSetStatus {
    /// The Nodes whose labels the set's selector matches.
    #[serde(default)]
    pub matching: u32,
    /// Of those, the ones whose KeepSetReport says the set ready.
    #[serde(default)]
    pub ready: u32,
    /// `ready/matching`.
    #[serde(default)]
    pub nodes: String,
    /// The images of `spec.workloads`' pod templates, as last resolved (sorted, each once).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub workload_images: Vec<String>,
    /// The workloads that could not be read, and why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unresolved: Vec<String>,
}

/// A workload a KeepSet names: its pod template's images (init, regular and ephemeral
/// containers, image volumes) are kept as if listed in `spec.images`.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Deserialize, Serialize)]
pub struct WorkloadRef {
    /// Deployment, StatefulSet, DaemonSet, ReplicaSet, Job or CronJob.
    pub kind: String,
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
}

impl std::fmt::Display for WorkloadRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}/{}", self.kind, self.namespace, self.name)
    }
}

/// A KeepSet's spec.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct KeepSetSpec {
    /// The image names (tags or digest references).
    #[serde(default)]
    pub images: Vec<String>,
    /// Workloads whose pod template's images the set also keeps (resolved by the agent
    /// holding the Lease into the set's `status.workloadImages`).
    #[serde(default)]
    pub workloads: Vec<WorkloadRef>,
    /// The nodes it selects (`{}`: every node).
    #[serde(default)]
    pub node_selector: Option<LabelSelector>,
    /// `pin` (pulled at once, runtime-pinned) or `warm` (pulled ahead within the disk budget,
    /// kept while the set holds).
    #[serde(default)]
    pub mode: Option<String>,
    /// The end of its lifetime, RFC 3339.
    #[serde(default)]
    pub until: Option<String>,
    /// Its lifetime from its creation, a Go duration.
    #[serde(default)]
    pub duration: Option<String>,
    /// Between sets naming one image, the higher wins.
    #[serde(default)]
    pub priority: i32,
    /// Why, shown in the pins' reason.
    #[serde(default)]
    pub reason: String,
    /// The pull Secrets its pulls use, by name, in the agent's own namespace.
    #[serde(default)]
    pub pull_secrets: Vec<SecretName>,
}

/// A pull Secret a KeepSet names (`{name: ...}`, as a pod's `imagePullSecrets`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
pub struct SecretName {
    /// The Secret's name.
    pub name: String,
}

impl kube::Resource for KeepSetObject {
    type DynamicType = ();
    type Scope = kube::core::ClusterResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("KeepSet")
    }
    fn group(_: &()) -> Cow<'_, str> {
        Cow::Borrowed(GROUP)
    }
    fn version(_: &()) -> Cow<'_, str> {
        Cow::Borrowed(VERSION)
    }
    fn plural(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("keepsets")
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// Whether `selector` selects a node labelled `labels`, as the API server's label selectors
/// do: every `matchLabels` pair and every `matchExpressions` requirement (In, NotIn, Exists,
/// DoesNotExist); an unknown operator selects nothing.
pub fn selects(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    let pairs = selector
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    pairs
        && selector.match_expressions.iter().flatten().all(|req| {
            let value = labels.get(&req.key);
            let values = req.values.as_deref().unwrap_or_default();
            match req.operator.as_str() {
                "In" => value.is_some_and(|v| values.contains(v)),
                "NotIn" => value.is_none_or(|v| !values.contains(v)),
                "Exists" => value.is_some(),
                "DoesNotExist" => value.is_none(),
                _ => false,
            }
        })
}

/// What the agent holds of `object`, or why it cannot be read.
pub fn keep_set_of(object: &KeepSetObject) -> Result<KeepSet, String> {
    let spec = &object.spec;
    let mode = match spec.mode.as_deref().unwrap_or("pin") {
        "pin" => KeepSetMode::Pin,
        "warm" => KeepSetMode::Warm,
        other => {
            return Err(format!(
                "mode {other:?} is not carried by this agent (pin and warm are)"
            ));
        }
    };
    let until = match (&spec.until, &spec.duration) {
        (Some(_), Some(_)) => return Err("it gives both until and duration".to_owned()),
        (Some(until), None) => crate::format::parse_rfc3339_or_why(until)
            .map_err(|e| format!("spec.until {until:?}: {e}"))?,
        (None, Some(duration)) => {
            let lifetime = crate::format::parse_go_duration(duration)
                .map_err(|e| format!("spec.duration {duration:?}: {e}"))?;
            let created = object
                .metadata
                .creation_timestamp
                .as_ref()
                .ok_or("spec.duration: the object has no creationTimestamp")?;
            let created = i64::try_from(created.0.as_nanosecond())
                .map_err(|_| "its creationTimestamp is out of range".to_owned())?;
            let lifetime = i64::try_from(lifetime.as_nanos())
                .map_err(|_| format!("spec.duration {duration:?} is out of range"))?;
            UnixNanos(created.saturating_add(lifetime).max(1))
        }
        (None, None) => UnixNanos::NEVER,
    };
    // The workloads' images as the Lease's holder last resolved them, after the set's own.
    let mut images = spec.images.clone();
    if !spec.workloads.is_empty()
        && let Some(status) = &object.status
    {
        let own: std::collections::BTreeSet<&String> = spec.images.iter().collect();
        images.extend(
            status
                .workload_images
                .iter()
                .filter(|image| !own.contains(image))
                .cloned(),
        );
    }
    Ok(KeepSet {
        name: object.metadata.name.clone().unwrap_or_default(),
        generation: object.metadata.generation.unwrap_or_default(),
        images,
        until,
        priority: spec.priority,
        reason: spec.reason.clone(),
        mode,
        pull_secrets: spec.pull_secrets.iter().map(|s| s.name.clone()).collect(),
    })
}

/// The watch's state: every set read (with its selector), this node's labels once read, the
/// relist in progress, and the sets whose refusal was logged.
#[derive(Debug)]
pub struct KeepSetWatch {
    handle: NodeKeepSets,
    sets: BTreeMap<String, (LabelSelector, KeepSet)>,
    listed: bool,
    labels: Option<BTreeMap<String, String>>,
    relist: Option<BTreeMap<String, (LabelSelector, KeepSet)>>,
    refused: BTreeMap<String, String>,
}

impl KeepSetWatch {
    /// A watch writing `handle`.
    pub fn new(handle: NodeKeepSets) -> KeepSetWatch {
        KeepSetWatch {
            handle,
            sets: BTreeMap::new(),
            listed: false,
            labels: None,
            relist: None,
            refused: BTreeMap::new(),
        }
    }

    /// Reads `object`, logging (once per set and reason) one that cannot be read.
    fn read(&mut self, object: &KeepSetObject) -> Option<(LabelSelector, KeepSet)> {
        let name = object.metadata.name.clone().unwrap_or_default();
        let read = keep_set_of(object).and_then(|set| {
            let selector = object
                .spec
                .node_selector
                .clone()
                .ok_or("it has no nodeSelector")?;
            Ok((selector, set))
        });
        match read {
            Ok(read) => {
                self.refused.remove(&name);
                Some(read)
            }
            Err(why) => {
                if self.refused.len() < crate::gc::MAX_KEEPSETS
                    && self.refused.get(&name) != Some(&why)
                {
                    warn!(keep_set = name.as_str(), "A KeepSet is not held: {why}");
                    self.refused.insert(name, why);
                }
                None
            }
        }
    }

    /// Applies one event of the KeepSets' watch.
    pub fn apply_set(&mut self, event: Event<KeepSetObject>) {
        match event {
            Event::Apply(object) => {
                let name = object.metadata.name.clone().unwrap_or_default();
                match self.read(&object) {
                    Some(read) => self.sets.insert(name, read),
                    None => self.sets.remove(&name),
                };
            }
            Event::Delete(object) => {
                let name = object.metadata.name.clone().unwrap_or_default();
                self.refused.remove(&name);
                self.sets.remove(&name);
            }
            Event::Init => {
                self.relist = Some(BTreeMap::new());
                return;
            }
            Event::InitApply(object) => {
                let name = object.metadata.name.clone().unwrap_or_default();
                if let Some(read) = self.read(&object)
                    && let Some(relist) = &mut self.relist
                {
                    relist.insert(name, read);
                }
                return;
            }
            Event::InitDone => {
                let Some(relist) = self.relist.take() else {
                    return;
                };
                info!(keep_sets = relist.len(), "Listed the KeepSets");
                self.sets = relist;
                self.listed = true;
            }
        }
        self.publish();
    }

    /// Applies one event of this node's watch (its labels).
    pub fn apply_node(&mut self, event: Event<Node>) {
        match event {
            Event::Apply(node) | Event::InitApply(node) => {
                let labels = node.metadata.labels.unwrap_or_default();
                if self.labels.as_ref() != Some(&labels) {
                    info!(
                        labels = labels.len(),
                        "Read this node's labels for the KeepSets"
                    );
                    self.labels = Some(labels);
                    self.publish();
                }
            }
            // A deleted Node keeps its last labels: its pins hold until it is back or gone.
            Event::Delete(_) | Event::Init | Event::InitDone => {}
        }
    }

    /// Writes the sets selecting this node, once the sets were listed and the labels read.
    fn publish(&self) {
        let Some(labels) = &self.labels else {
            return;
        };
        if !self.listed {
            return;
        }
        let selected: BTreeMap<String, KeepSet> = self
            .sets
            .iter()
            .filter(|(_, (selector, _))| selects(selector, labels))
            .map(|(name, (_, set))| (name.clone(), set.clone()))
            .collect();
        self.handle.replace(selected);
    }
}

/// Watches the KeepSets and this node's labels until the task is dropped, writing the sets
/// selecting `node` to `handle`.
pub async fn watch_keep_sets(client: Client, node: String, handle: NodeKeepSets, reach: ApiReach) {
    let watch = Arc::new(Mutex::new(KeepSetWatch::new(handle.clone())));
    let sets = {
        let watch = watch.clone();
        let health = handle.health();
        super::drive::drive(
            Api::<KeepSetObject>::all(client.clone()),
            watcher::Config::default(),
            "the KeepSets",
            health,
            reach.clone(),
            move |event| {
                watch
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .apply_set(event)
            },
        )
    };
    let node_watch = super::drive::drive(
        Api::<Node>::all(client),
        watcher::Config::default().fields(&format!("metadata.name={node}")),
        "this node's labels",
        Arc::new(crate::gc::WatchHealth::default()),
        reach,
        move |event| {
            watch
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .apply_node(event)
        },
    );
    tokio::join!(sets, node_watch);
}

#[cfg(test)]
#[path = "keepsets_tests.rs"]
mod tests;
