//! The Deployments' revisions: a watch of every namespace's ReplicaSets, each read as its
//! Deployment (its controller ownerReference), its revision (the
//! `deployment.kubernetes.io/revision` annotation the Deployment controller writes) and its
//! template's images ([`replicaset_revision`]); per Deployment the newest revision is current,
//! the one before it the rollback set (`kubectl rollout undo` goes back to it), older ones
//! superseded ([`revisions_of`]), written to [`ClusterSignals`] ([`ReplicaSetWatch`]), which
//! the predictive order reads (`crate::gc::signals`' rule).
//!
//! A Deployment's revisions are read whichever nodes its pods ran on: the order only ranks
//! images listed on this node, so a revision whose images are not here changes nothing.
//!
//! Invariants: only reads (list and watch); each ReplicaSet is held as its revision and image
//! names, never as the object, at most [`MAX_REPLICASETS`] (more are refused, counted); a
//! relist replaces the set once complete.

use std::collections::{BTreeMap, BTreeSet};

use super::reach::ApiReach;
use k8s_openapi::api::apps::v1::ReplicaSet;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client};
use tracing::info;

use super::pods::spec_images;
use crate::gc::{ClusterSignals, MAX_SUPERSEDED, Revisions};

pub use super::slim::REVISION_ANNOTATION;

/// The most ReplicaSets held (a Deployment keeps `revisionHistoryLimit`, default 10, old ones).
pub const MAX_REPLICASETS: usize = 16_384;

/// A ReplicaSet as the signals read it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplicaSetRevision {
    /// Its Deployment, `namespace/name`.
    pub deployment: String,
    /// Its revision.
    pub revision: u64,
    /// Its template's images.
    pub images: Vec<String>,
}

/// `replicaset`'s Deployment, revision and images; `None` for a ReplicaSet no Deployment
/// controls, or without a readable revision.
pub fn replicaset_revision(replicaset: &ReplicaSet) -> Option<ReplicaSetRevision> {
    let deployment = super::pods::controller_named(&replicaset.metadata, "apps/v1", "Deployment")?;
    let revision = replicaset
        .metadata
        .annotations
        .as_ref()?
        .get(REVISION_ANNOTATION)?
        .parse()
        .ok()?;
    let images = replicaset
        .spec
        .template
        .as_ref()
        .and_then(|t| t.spec.as_ref())
        .map(spec_images)
        .unwrap_or_default();
    Some(ReplicaSetRevision {
        deployment: format!(
            "{}/{}",
            replicaset.metadata.namespace.as_deref().unwrap_or_default(),
            deployment
        ),
        revision,
        images,
    })
}

/// A Deployment's revisions from its ReplicaSets' (`revision`, images): the newest is
/// current, the next the rollback set, the older ones' images in neither superseded (newest
/// last, at most [`MAX_SUPERSEDED`]).
pub fn revisions_of(mut sets: Vec<(u64, Vec<String>)>) -> Revisions {
    sets.sort_by_key(|s| std::cmp::Reverse(s.0));
    let mut sets = sets.into_iter().map(|(_, images)| images);
    let current = sets.next().unwrap_or_default();
    let previous = sets.next().unwrap_or_default();
    let mut seen: BTreeSet<String> = current.iter().chain(&previous).cloned().collect();
    let mut superseded: Vec<String> = sets
        .flatten()
        .filter(|image| seen.insert(image.clone()))
        .take(MAX_SUPERSEDED)
        .collect();
    superseded.reverse();
    Revisions {
        current,
        previous,
        superseded,
    }
}

/// `namespace/name` of a ReplicaSet.
fn replicaset_key(replicaset: &ReplicaSet) -> String {
    format!(
        "{}/{}",
        replicaset.metadata.namespace.as_deref().unwrap_or_default(),
        replicaset.metadata.name.as_deref().unwrap_or_default()
    )
}

/// Held ReplicaSets by (Deployment, ReplicaSet): a Deployment's are one range.
type Held = BTreeMap<(String, String), (u64, Vec<String>)>;

/// The watch's state: the signals it writes, the ReplicaSets held and the relist in progress.
#[derive(Debug)]
pub struct ReplicaSetWatch {
    signals: ClusterSignals,
    held: Held,
    /// Each held ReplicaSet's Deployment (a ReplicaSet's owner may change: adoption).
    deployment_of: BTreeMap<String, String>,
    relist: Option<Vec<(String, ReplicaSetRevision)>>,
}

impl ReplicaSetWatch {
    /// A watch writing `signals`.
    pub fn new(signals: ClusterSignals) -> ReplicaSetWatch {
        ReplicaSetWatch {
            signals,
            held: Held::new(),
            deployment_of: BTreeMap::new(),
            relist: None,
        }
    }

    /// The revisions of `deployment` from the held ReplicaSets.
    fn revisions(&self, deployment: &str) -> Revisions {
        let sets = self
            .held
            .range((deployment.to_owned(), String::new())..)
            .take_while(|((d, _), _)| d == deployment)
            .map(|(_, set)| set.clone())
            .collect();
        revisions_of(sets)
    }

    /// Forgets `key`; returns the Deployment it belonged to.
    fn forget(&mut self, key: &str) -> Option<String> {
        let deployment = self.deployment_of.remove(key)?;
        self.held.remove(&(deployment.clone(), key.to_owned()));
        Some(deployment)
    }

    /// Holds `key` as `rs` (none: forgets it); returns the Deployments whose revisions change.
    fn hold(&mut self, key: String, rs: Option<ReplicaSetRevision>) -> Vec<String> {
        let mut touched: Vec<String> = self.forget(&key).into_iter().collect();
        if let Some(rs) = rs {
            if self.held.len() >= MAX_REPLICASETS {
                self.signals.replicasets_watch_health().refuse();
            } else {
                self.deployment_of
                    .insert(key.clone(), rs.deployment.clone());
                self.held
                    .insert((rs.deployment.clone(), key), (rs.revision, rs.images));
                touched.push(rs.deployment);
            }
        }
        touched.dedup();
        touched
    }

    /// Applies one watch event.
    pub fn apply(&mut self, event: Event<ReplicaSet>) {
        match event {
            Event::Apply(rs) => {
                let touched = self.hold(replicaset_key(&rs), replicaset_revision(&rs));
                for deployment in touched {
                    let revisions = self.revisions(&deployment);
                    self.signals.set_revisions(deployment, revisions);
                }
            }
            Event::Delete(rs) => {
                let touched = self.hold(replicaset_key(&rs), None);
                for deployment in touched {
                    let revisions = self.revisions(&deployment);
                    self.signals.set_revisions(deployment, revisions);
                }
            }
            Event::Init => self.relist = Some(Vec::new()),
            Event::InitApply(rs) => {
                if let (Some(relist), Some(revision)) = (&mut self.relist, replicaset_revision(&rs))
                {
                    relist.push((replicaset_key(&rs), revision));
                }
            }
            Event::InitDone => {
                if let Some(relist) = self.relist.take() {
                    let listed = relist.len();
                    self.held.clear();
                    self.deployment_of.clear();
                    for (key, rs) in relist {
                        self.hold(key, Some(rs));
                    }
                    let deployments: BTreeSet<String> =
                        self.deployment_of.values().cloned().collect();
                    let workloads = deployments
                        .into_iter()
                        .map(|d| {
                            let revisions = self.revisions(&d);
                            (d, revisions)
                        })
                        .collect();
                    self.signals.replace_workloads(workloads);
                    info!(replicasets = listed, "Listed the ReplicaSets");
                }
            }
        }
    }
}

/// Watches every namespace's ReplicaSets until the task is dropped, writing the Deployments'
/// revisions to `signals`.
pub async fn watch_replicasets(client: Client, signals: ClusterSignals, reach: ApiReach) {
    let api: Api<super::slim::Slim<ReplicaSet>> = Api::all(client);
    let mut watch = ReplicaSetWatch::new(signals.clone());
    super::drive::drive(
        api,
        watcher::Config::default(),
        "the ReplicaSets",
        signals.replicasets_watch_health(),
        reach,
        |event| watch.apply(super::slim::unslim(event)),
    )
    .await;
}

#[cfg(test)]
#[path = "replicasets_tests.rs"]
mod tests;
