//! The CronJobs: a watch of every namespace's CronJobs turned into what the signals read of
//! each ([`cronjob_signal`]: its schedule, whether it is suspended, its job template's images,
//! whether the template names this node), written to [`ClusterSignals`] as events come
//! ([`CronJobWatch`]). The predictive order reads each image's next run from them; the agent
//! keeps (and runtime-pins) a CronJob's images from a lead before its run and pulls them ahead
//! when its runs are this node's.
//!
//! The schedule is read as the CronJob controller reads it (`crate::gc::CronSchedule`, robfig
//! cron v3's standard parser); a CronJob without `spec.timeZone` runs on the controller
//! manager's local time, taken to be UTC (the control plane's images run in UTC); one with a
//! `timeZone` is read in that zone as the controller reads it (`crate::gc::CronZone`: the IANA
//! database, robfig's walk across the zone's transitions). One whose `timeZone` the database
//! does not know, or whose schedule the parser refuses, is not held: counted in the watch's
//! refusals and logged once.
//!
//! Invariants: only reads (list and watch); each CronJob is held as its schedule and image
//! names, never as the object; a relist replaces the set once complete.

use std::collections::{BTreeMap, BTreeSet};

use super::reach::ApiReach;
use k8s_openapi::api::batch::v1::CronJob;
use k8s_openapi::api::core::v1::PodSpec;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client};
use tracing::{info, warn};

use super::pods::spec_images;
use crate::gc::{ClusterSignals, CronJobSignal, CronSchedule, CronZone, MAX_CRONJOBS};

/// The node label naming a node (`kubernetes.io/hostname`).
const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";

/// `namespace/name` of a CronJob.
fn cronjob_key(cronjob: &CronJob) -> String {
    format!(
        "{}/{}",
        cronjob.metadata.namespace.as_deref().unwrap_or_default(),
        cronjob.metadata.name.as_deref().unwrap_or_default()
    )
}

/// Whether `spec` names `node`: its `nodeName`, or its node selector's hostname label.
fn names_node(spec: &PodSpec, node: &str) -> bool {
    spec.node_name.as_deref() == Some(node)
        || spec
            .node_selector
            .as_ref()
            .and_then(|s| s.get(HOSTNAME_LABEL))
            .is_some_and(|n| n == node)
}

/// What the signals read of `cronjob` on `node`, or why it cannot be read.
pub fn cronjob_signal(cronjob: &CronJob, node: &str) -> Result<CronJobSignal, String> {
    let spec = &cronjob.spec;
    let zone = match spec.time_zone.as_deref() {
        None => CronZone::utc(),
        Some(name) => CronZone::named(name).map_err(|e| format!("its timeZone: {e}"))?,
    };
    let schedule = CronSchedule::parse(&spec.schedule)
        .map_err(|e| format!("its schedule {:?}: {e}", spec.schedule))?;
    let template = spec
        .job_template
        .spec
        .as_ref()
        .and_then(|job| job.template.spec.as_ref());
    Ok(CronJobSignal {
        schedule,
        zone,
        suspend: spec.suspend.unwrap_or(false),
        images: template.map(spec_images).unwrap_or_default(),
        here: template.is_some_and(|t| names_node(t, node)),
    })
}

/// The watch's state: the signals it writes, this node's name, the relist in progress and the
/// CronJobs whose refusal was logged (each once, at most [`MAX_CRONJOBS`] remembered).
#[derive(Debug)]
pub struct CronJobWatch {
    signals: ClusterSignals,
    node: String,
    relist: Option<BTreeMap<String, CronJobSignal>>,
    refused: BTreeSet<String>,
}

impl CronJobWatch {
    /// A watch writing `signals` for `node`.
    pub fn new(signals: ClusterSignals, node: String) -> CronJobWatch {
        CronJobWatch {
            signals,
            node,
            relist: None,
            refused: BTreeSet::new(),
        }
    }

    /// Reads `cronjob`, counting and logging (once per CronJob) one that cannot be read.
    fn read(&mut self, key: &str, cronjob: &CronJob) -> Option<CronJobSignal> {
        match cronjob_signal(cronjob, &self.node) {
            Ok(signal) => {
                self.refused.remove(key);
                Some(signal)
            }
            Err(why) => {
                if self.refused.len() < MAX_CRONJOBS && self.refused.insert(key.to_owned()) {
                    self.signals.refuse_cronjob();
                    warn!(
                        cronjob = key,
                        "A CronJob is not read by the cluster signals: {why}"
                    );
                }
                None
            }
        }
    }

    /// Applies one watch event.
    pub fn apply(&mut self, event: Event<CronJob>) {
        match event {
            Event::Apply(cronjob) => {
                let key = cronjob_key(&cronjob);
                match self.read(&key, &cronjob) {
                    Some(signal) => self.signals.set_cronjob(key, signal),
                    None => self.signals.remove_cronjob(&key),
                }
            }
            Event::Delete(cronjob) => {
                let key = cronjob_key(&cronjob);
                self.refused.remove(&key);
                self.signals.remove_cronjob(&key);
            }
            Event::Init => self.relist = Some(BTreeMap::new()),
            Event::InitApply(cronjob) => {
                let key = cronjob_key(&cronjob);
                if let Some(signal) = self.read(&key, &cronjob)
                    && let Some(relist) = &mut self.relist
                {
                    relist.insert(key, signal);
                }
            }
            Event::InitDone => {
                if let Some(relist) = self.relist.take() {
                    let listed = relist.len();
                    self.signals.replace_cronjobs(relist);
                    info!(cronjobs = listed, "Listed the CronJobs");
                }
            }
        }
    }
}

/// Watches every namespace's CronJobs until the task is dropped, writing them to `signals`.
pub async fn watch_cronjobs(
    client: Client,
    node: String,
    signals: ClusterSignals,
    reach: ApiReach,
) {
    let api: Api<super::slim::Slim<CronJob>> = Api::all(client);
    let mut watch = CronJobWatch::new(signals.clone(), node);
    super::drive::drive(
        api,
        watcher::Config::default(),
        "the CronJobs",
        signals.cronjobs_watch_health(),
        reach,
        |event| watch.apply(super::slim::unslim(event)),
    )
    .await;
}

#[cfg(test)]
#[path = "cronjobs_tests.rs"]
mod tests;
