//! The runtime pins: the agent makes containerd carry what imagekeeper keeps. Every name of
//! every image a detect found kept (an operator's pin in force, a present warm set entry, an
//! irreplaceable image) is labelled `io.cri-containerd.pinned=pinned` in containerd's image
//! store (namespace `k8s.io`, through containerd's own Images API), with imagekeeper's own
//! label `io.imagekeeper.pinned=<why>` and its instance `io.imagekeeper.instance=<id>` (the
//! database's `instance_id`: a second agent on the same containerd leaves these alone) beside
//! it. containerd 1.7.10 and later then list the
//! image as `pinned: true` in CRI ListImages, and the kubelet's image GC and eviction manager
//! skip pinned images (kubelet master `pkg/kubelet/images/image_gc_manager.go`,
//! `imagesInEvictionOrder`). Which names get which label, and which keeps containerd then
//! carries, is `gc::runtime_pins` (pure); this file is the wiring: it reads containerd's
//! labels, calls the plan, writes the labels and keeps the reconciler's state.
//!
//! Invariants: only the plan's writes are made (a pin imagekeeper did not set is never
//! cleared, see `gc::runtime_pins`), and only on names the record of what this agent labelled
//! holds (schema 6's `runtime_labels`, `gc::runtime_pin_record`): each pin's row is written
//! durably before its label, each unpin's row removed after it; the labels this instance wrote
//! before the record are adopted once, at the first reconcile of the file. Labels are read
//! from containerd at every reconcile and only differences are written, so a steady cycle
//! writes nothing and a failed write is
//! retried at the next one; each failing name is logged once (until it succeeds) and every
//! failure is counted. `auto` decides once, from CRI Version, whether the runtime can carry
//! pins (containerd 1.7.10 and later); on any other runtime it turns itself off with one log
//! line and the `imagekeeper_runtime_pins_enabled` gauge at 0. CRI-O (a `pinned_images`
//! drop-in and a config reload) is not built.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use tracing::{info, warn};

use super::config::RuntimePins;
use crate::cri::ContainerdImages;
use crate::gc::KeptImage;
use crate::gc::runtime_pin_record::{
    RecordPlan, RecordStanding, plan_with_record, record_standing,
};
use crate::gc::runtime_pins::{
    CarriedKeep, LabelChange, OWN_LABEL, PinsState, carried_keeps, label_instance, label_owner,
    other_instances, pinned_names, runtime_pin_answer, state_note,
};
use crate::runtime::{CriError, RpcCode, RuntimeVersion, runtime_carries_pins};

/// How long a reconcile may take before its caller gives up on it (a containerd Images
/// service that accepts calls and never answers): the reconcile is then reported failing.
/// Its calls' own timeout is 30 s; a healthy containerd lists and labels in milliseconds.
pub const RECONCILE_BOUND: std::time::Duration = std::time::Duration::from_secs(10);

/// The counters the metrics read.
#[derive(Debug, Default)]
pub struct PinCounters {
    /// Label writes: [succeeded, failed].
    pub writes: [AtomicU64; 2],
}

/// The runtime pins' reconciler.
#[derive(Debug)]
pub struct RuntimePinner {
    client: Option<ContainerdImages>,
    state: Mutex<PinsState>,
    /// Names whose last write failed (logged once until a write of them succeeds).
    failing: Mutex<BTreeSet<String>>,
    pub counters: PinCounters,
    /// After the last reconcile: each kept image, why, whether CRI ListImages listed it pinned
    /// at the detect before it, and whether containerd's pinned label was on one of its names
    /// (by imagekeeper or anyone) when the reconcile read the labels.
    carried: Mutex<BTreeMap<crate::model::RecordKey, CarriedKeep>>,
    /// This agent's instance ([`instance_id`]): the value of `io.imagekeeper.instance` on the
    /// labels it writes; it changes only names that carry it (or an unnamed label).
    instance: String,
    /// After the last reconcile: how many names carry each other instance's labels.
    others: Mutex<BTreeMap<String, usize>>,
    /// Why the last reconcile did not carry every keep (containerd's images not listed, a
    /// label write failed, no answer within [`RECONCILE_BOUND`]); `None` after one that did.
    failure: Mutex<Option<String>>,
    /// After the last reconcile: the orphaned and foreign names it found.
    findings: Mutex<RecordFindings>,
}

/// What the last reconcile found against the record of the labels this agent wrote
/// (`gc::runtime_pin_record`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecordFindings {
    /// Recorded names whose `io.imagekeeper.pinned` another client stripped, the pinned label
    /// left: still the agent's (relabelled while kept, cleared after).
    pub orphaned: BTreeSet<String>,
    /// Names carrying this agent's labels (or unnamed ones) it never wrote: left alone.
    pub foreign: BTreeSet<String>,
}

/// The record of what this agent labelled (by name) and whether its labels from before the
/// record were adopted (`runtime_labels_adopted`).
fn read_record(
    store: &crate::store::Store,
) -> Result<(BTreeMap<String, crate::model::RuntimeLabel>, bool), crate::store::StoreError> {
    let record = store.runtime_labels()?.into_iter().collect();
    let adopted = store
        .meta(crate::store::meta_keys::RUNTIME_LABELS_ADOPTED)?
        .is_some();
    Ok((record, adopted))
}

/// The rows a plan writes before its label writes: the forgotten ones removed, then each
/// adopted and each pinned name's written, and the adoption's mark (one transaction).
fn rows_before(plan: &RecordPlan, now: crate::model::UnixNanos) -> crate::store::Batch {
    let mut batch = crate::store::Batch::new();
    for name in &plan.forget {
        batch.remove_runtime_label(name.clone());
    }
    for (name, label) in &plan.put {
        batch.put_runtime_label(name.clone(), label.clone());
    }
    if plan.adopts {
        batch.set_meta(crate::store::meta_keys::RUNTIME_LABELS_ADOPTED, now.0);
    }
    batch
}

/// The `meta` entry that names this database's agent instance (a random non-zero 64-bit
/// value, written at the first start that needs it).
pub const INSTANCE_ID_META: &str = "instance_id";

/// This database's agent instance, as `io.imagekeeper.instance` carries it (16 hex digits):
/// read from the `meta` table, or drawn at random and written there the first time.
pub fn instance_id(store: &crate::store::Store) -> Result<String, crate::store::StoreError> {
    if let Some(instance) = stored_instance_id(store)? {
        return Ok(instance);
    }
    let id = fastrand::i64(1..);
    let mut batch = crate::store::Batch::new();
    batch.set_meta(INSTANCE_ID_META, id);
    store.apply(&batch)?;
    Ok(instance_text(id))
}

/// The agent instance `store` names (16 hex digits), if an agent has named one; read-only.
pub fn stored_instance_id(
    store: &crate::store::Store,
) -> Result<Option<String>, crate::store::StoreError> {
    Ok(store
        .meta(INSTANCE_ID_META)?
        .filter(|id| *id != 0)
        .map(instance_text))
}

/// An instance id as `io.imagekeeper.instance` carries it: 16 hex digits.
fn instance_text(id: i64) -> String {
    format!("{:016x}", id as u64)
}

impl RuntimePinner {
    /// A reconciler for `mode` writing as `instance` ([`instance_id`]); with `Auto`, a client
    /// of containerd at `address` (not dialed yet).
    pub fn new(
        mode: RuntimePins,
        address: &str,
        instance: String,
    ) -> Result<RuntimePinner, CriError> {
        let (client, state) = match mode {
            RuntimePins::Off => (None, PinsState::Off("runtimePins = off".to_owned())),
            RuntimePins::Auto => (
                Some(ContainerdImages::connect(
                    address,
                    crate::cri::CONTAINERD_CRI_NAMESPACE,
                    std::time::Duration::from_secs(5),
                    std::time::Duration::from_secs(30),
                )?),
                PinsState::Undecided,
            ),
        };
        Ok(RuntimePinner {
            client,
            state: Mutex::new(state),
            failing: Mutex::new(BTreeSet::new()),
            counters: PinCounters::default(),
            carried: Mutex::new(BTreeMap::new()),
            instance,
            others: Mutex::new(BTreeMap::new()),
            failure: Mutex::new(None),
            findings: Mutex::new(RecordFindings::default()),
        })
    }

    /// Why the last reconcile did not carry every keep, or `None`.
    pub fn failure(&self) -> Option<String> {
        self.failure
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    fn set_failure(&self, why: Option<String>) {
        let mut failure = self
            .failure
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match (&*failure, &why) {
            (None, Some(why)) => {
                warn!(reason = %why, "Runtime pins failing: the kubelet's image GC and eviction manager may remove imagekeeper's keeps (reported on /readyz and imagekeeper_runtime_pins_failing until a reconcile succeeds)");
            }
            (Some(_), None) => info!("Runtime pins: a reconcile carried every keep again"),
            _ => {}
        }
        *failure = why;
    }

    /// The caller gave up on a reconcile after `bound` (containerd's Images service did not
    /// answer).
    pub fn gave_up(&self, bound: std::time::Duration) {
        self.set_failure(Some(format!(
            "containerd's Images service did not answer within {} s",
            bound.as_secs()
        )));
    }

    /// After the last reconcile: how many of containerd's names carry each other instance's
    /// labels (left alone by this agent).
    pub fn other_instances(&self) -> BTreeMap<String, usize> {
        self.others
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    pub fn state(&self) -> PinsState {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// With `auto` still undecided: decides from the runtime's Version answer (an unreachable
    /// runtime leaves it undecided). Logs the decision once.
    pub fn decide(&self, version: Result<RuntimeVersion, CriError>) {
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if *state != PinsState::Undecided {
            return;
        }
        let decided = match version {
            Ok(v) => match runtime_carries_pins(&v) {
                Ok(()) => {
                    info!(
                        runtime = %v.runtime_name,
                        version = %v.runtime_version,
                        instance = %self.instance,
                        "Runtime pins on: the images imagekeeper keeps are labelled io.cri-containerd.pinned=pinned, so the kubelet's image GC and eviction spare them"
                    );
                    PinsState::On
                }
                Err(why) => {
                    warn!(
                        reason = %why,
                        "Runtime pins off: the kubelet's image GC and eviction manager cannot see imagekeeper's keeps on this runtime"
                    );
                    PinsState::Off(why)
                }
            },
            Err(e)
                if matches!(
                    e.code(),
                    Some(RpcCode::Unavailable | RpcCode::DeadlineExceeded)
                ) =>
            {
                return;
            }
            Err(e) => {
                let why = format!("the runtime did not say its version: {e}");
                warn!(
                    reason = %why,
                    "Runtime pins off: the kubelet's image GC and eviction manager cannot see imagekeeper's keeps on this runtime"
                );
                PinsState::Off(why)
            }
        };
        *state = decided;
    }

    /// Makes containerd's labels match `keeps`: lists containerd's images, reads the record of
    /// what this agent labelled (`store`'s `runtime_labels`), writes only the differences and
    /// only on recorded names (`gc::runtime_pin_record`): each pin's row durably before its
    /// label, each unpin's row removed after it. Returns how many label writes succeeded and
    /// failed. Does nothing unless on.
    pub async fn reconcile(
        &self,
        keeps: &[KeptImage],
        store: &crate::store::Store,
        now: crate::model::UnixNanos,
    ) -> (u64, u64) {
        let Some(client) = self
            .client
            .as_ref()
            .filter(|_| self.state() == PinsState::On)
        else {
            return (0, 0);
        };
        let images = match client.list().await {
            Ok(images) => images,
            Err(e) => {
                warn!(error = %e, "Runtime pins: cannot list containerd's images; retrying next cycle");
                self.set_failure(Some(format!("cannot list containerd's images: {e}")));
                return (0, 0);
            }
        };
        let plan = match read_record(store) {
            Ok((record, adopted)) => {
                plan_with_record(keeps, &images, &self.instance, &record, !adopted, now)
            }
            Err(e) => {
                warn!(error = %e, "Runtime pins: cannot read the record of the labels written; retrying next cycle");
                self.set_failure(Some(format!("cannot read the runtime labels' record: {e}")));
                return (0, 0);
            }
        };
        self.note_others(&images);
        self.note_record_findings(&plan);
        // The labels as they stand before this reconcile's writes, beside the CRI's list of the
        // detect just before: what containerd carries is the CRI's own `pinned` flag, and a
        // label it does not carry is a disagreement (`CarriedKeep::disagrees`).
        let carried = carried_keeps(keeps, &pinned_names(&images));
        // The rows first, durably: a label is the agent's only once its row is written.
        if let Err(e) = store.apply(&rows_before(&plan, now)) {
            warn!(error = %e, "Runtime pins: cannot record the labels about to be written; retrying next cycle");
            self.set_failure(Some(format!("cannot record the runtime labels: {e}")));
            return (0, 0);
        }
        let (ok, failed, unpinned) = self.write_labels(client, &images, &plan).await;
        let mut after = crate::store::Batch::new();
        for name in unpinned {
            after.remove_runtime_label(name);
        }
        if let Err(e) = store.apply(&after) {
            // The labels are gone; the next reconcile forgets the rows.
            warn!(error = %e, "Runtime pins: cannot remove the record of labels removed; the next reconcile does");
        }
        *self
            .carried
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = carried;
        self.set_failure(
            (failed > 0).then(|| format!("{failed} label write(s) failed (retried every cycle)")),
        );
        (ok, failed)
    }

    /// Counts the names of other instances and logs each new one once.
    fn note_others(&self, images: &[crate::runtime::LabelledImage]) {
        let others: BTreeMap<String, usize> = other_instances(images, &self.instance)
            .into_iter()
            .map(|(owner, names)| (owner.to_owned(), names))
            .collect();
        let new_owners: Vec<String> = {
            let mut known = self
                .others
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let new = others
                .keys()
                .filter(|owner| !known.contains_key(*owner))
                .cloned()
                .collect();
            *known = others.clone();
            new
        };
        for owner in new_owners {
            warn!(
                instance = %self.instance,
                other = %owner,
                names = others[&owner],
                "Runtime pins: another imagekeeper instance labels images on this containerd; its labels are left alone (one agent per containerd is the supported setup)"
            );
        }
    }

    /// Keeps the orphaned and foreign names the plan found (the metric's) and logs each new
    /// one once.
    fn note_record_findings(&self, plan: &RecordPlan) {
        let mut findings = self
            .findings
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for name in plan
            .orphaned
            .iter()
            .filter(|n| !findings.orphaned.contains(*n))
        {
            warn!(image = %name, "Runtime pins: another client stripped io.imagekeeper.pinned from a name this agent labelled, leaving its io.cri-containerd.pinned label: the agent still owns it (its record says so) and clears it once the image is no longer kept");
        }
        for name in plan
            .foreign
            .iter()
            .filter(|n| !findings.foreign.contains(*n))
        {
            warn!(image = %name, instance = %self.instance, "Runtime pins: a name carries this agent's labels but the agent never wrote them (forged, or its record lost): left alone; `imagekeeper doctor` names it");
        }
        *findings = RecordFindings {
            orphaned: plan.orphaned.iter().cloned().collect(),
            foreign: plan.foreign.iter().cloned().collect(),
        };
    }

    /// The plan's label writes; returns how many succeeded and failed, and the names unpinned.
    async fn write_labels(
        &self,
        client: &ContainerdImages,
        images: &[crate::runtime::LabelledImage],
        plan: &RecordPlan,
    ) -> (u64, u64, Vec<String>) {
        let (mut ok, mut failed, mut unpinned) = (0, 0, Vec::new());
        for &(i, change) in &plan.changes {
            let image = &images[i];
            match client
                .update_labels(image, &change.labels(&self.instance))
                .await
            {
                Ok(()) => {
                    ok += 1;
                    self.counters.writes[0].fetch_add(1, Ordering::Relaxed);
                    if change == LabelChange::Unpin {
                        unpinned.push(image.name.clone());
                    }
                    let recovered = self
                        .failing
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .remove(&image.name);
                    if recovered {
                        info!(image = %image.name, "Runtime pins: label written after earlier failures");
                    }
                    tracing::debug!(image = %image.name, ?change, "Runtime pins: label written");
                }
                Err(e) => {
                    failed += 1;
                    self.counters.writes[1].fetch_add(1, Ordering::Relaxed);
                    let first = self
                        .failing
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .insert(image.name.clone());
                    if first {
                        warn!(image = %image.name, ?change, error = %e, "Runtime pins: label write failed; retrying every cycle (logged once)");
                    }
                }
            }
        }
        (ok, failed, unpinned)
    }

    /// After the last reconcile: the recorded names whose own label was stripped (orphaned)
    /// and the names labelled as this agent's it never wrote (foreign).
    pub fn record_findings(&self) -> RecordFindings {
        self.findings
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// After the last reconcile: each kept image, why it is kept, whether CRI ListImages
    /// listed it pinned at the detect before, and whether containerd's label was on it.
    pub fn carried_keeps(&self) -> BTreeMap<crate::model::RecordKey, CarriedKeep> {
        self.carried
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Why nothing is known of the runtime's pins (`pins`' and `inspect explain`'s note), or
    /// `None` when runtime pins are on.
    pub fn state_note(&self) -> Option<String> {
        state_note(&self.state())
    }

    /// Fills `view`'s runtime pin fields from the last reconcile ([`runtime_pin_answer`]).
    pub fn annotate(&self, view: &mut crate::gc::PinView) {
        let (pinned, note, labelled) =
            runtime_pin_answer(&self.state(), &self.carried_keeps(), view);
        view.runtime_pinned = pinned;
        view.runtime_pin_note = note;
        view.runtime_labelled = labelled;
    }

    /// The metrics' sample; `None` while `auto` is undecided.
    pub fn sample(&self) -> Option<crate::telemetry::RuntimePinsSample> {
        let enabled = match self.state() {
            PinsState::Undecided => return None,
            PinsState::On => true,
            PinsState::Off(_) => false,
        };
        let carried = self.carried_keeps();
        let findings = self.record_findings();
        Some(crate::telemetry::RuntimePinsSample {
            enabled,
            pinned_images: carried.values().filter(|c| c.carried).count() as u64,
            disagreeing_images: carried.values().filter(|c| c.disagrees()).count() as u64,
            other_instance_names: self.other_instances().values().sum::<usize>() as u64,
            orphaned_names: findings.orphaned.len() as u64,
            foreign_names: findings.foreign.len() as u64,
            failing: self.failure().is_some(),
            writes: [0, 1].map(|i| self.counters.writes[i].load(Ordering::Relaxed)),
        })
    }
}

/// One name `remove_runtime_pin_labels` cleared (or would clear), and whose label it was.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RemovedPinLabel {
    /// The containerd image name.
    pub name: String,
    /// The instance its `io.imagekeeper.instance` named; `None`: written before instances.
    pub instance: Option<String>,
}

/// Removes imagekeeper's labels (the pinned label, `io.imagekeeper.pinned` and
/// `io.imagekeeper.instance`) from every image name in containerd's `k8s.io` namespace that
/// carries imagekeeper's own label — only `instance`'s when given — and from no other (the
/// uninstall step: `imagekeeper remove-runtime-pins`, with no database to read). With
/// `dry_run`, writes nothing. Returns the names with whose labels they were, sorted by name.
pub async fn remove_runtime_pin_labels(
    client: &ContainerdImages,
    dry_run: bool,
    instance: Option<&str>,
) -> Result<Vec<RemovedPinLabel>, CriError> {
    Ok(remove_labels(client, dry_run, instance, None)
        .await?
        .removed)
}

/// The database's record of what its agent labelled, for [`remove_recorded_runtime_pin_labels`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LabelRecord {
    /// The database's agent instance.
    pub instance: String,
    /// The names its record holds (`runtime_labels`).
    pub names: BTreeSet<String>,
    /// Whether its agent adopted its labels from before the record (`runtime_labels_adopted`):
    /// until then its instance's labels count as recorded, as its first reconcile would take
    /// them.
    pub adopted: bool,
}

/// The database of `store`'s record of the labels its agent wrote; `None` before any agent
/// ran on it (no instance).
pub fn label_record(
    store: &crate::store::Store,
) -> Result<Option<LabelRecord>, crate::store::StoreError> {
    let Some(instance) = stored_instance_id(store)? else {
        return Ok(None);
    };
    let (names, adopted) = read_record(store)?;
    Ok(Some(LabelRecord {
        instance,
        names: names.into_keys().collect(),
        adopted,
    }))
}

/// What [`remove_recorded_runtime_pin_labels`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RemovedPinLabels {
    /// The names cleared (or that would be), sorted by name.
    pub removed: Vec<RemovedPinLabel>,
    /// Names carrying the record's instance's labels (or unnamed ones) that its agent never
    /// wrote (forged, or the record lost): left as they are, sorted.
    pub foreign: Vec<String>,
}

/// [`remove_runtime_pin_labels`] with `record`, the database's: a name carrying its
/// instance's labels (or unnamed ones) is cleared only when the record holds it, and a
/// recorded name whose `io.imagekeeper.pinned` another client stripped has its pinned label
/// cleared too (the agent wrote it); another instance's labels as without a record.
pub async fn remove_recorded_runtime_pin_labels(
    client: &ContainerdImages,
    dry_run: bool,
    instance: Option<&str>,
    record: &LabelRecord,
) -> Result<RemovedPinLabels, CriError> {
    remove_labels(client, dry_run, instance, Some(record)).await
}

/// Whether `image` is to be cleared: `Some(owner)` (whose labels) when it is, `Err(())` when
/// it claims to be `record`'s instance's and the record does not hold it.
fn to_remove(
    image: &crate::runtime::LabelledImage,
    instance: Option<&str>,
    record: Option<&LabelRecord>,
) -> Result<Option<Option<String>>, ()> {
    let owner = label_instance(image).map(str::to_owned);
    let own = image.labels.contains_key(OWN_LABEL);
    let Some(record) = record else {
        let wanted = own && instance.is_none_or(|w| owner.as_deref() == Some(w));
        return Ok(wanted.then_some(owner));
    };
    if instance.is_some_and(|w| w != record.instance) {
        let wanted = own && owner.as_deref() == instance;
        return Ok(wanted.then_some(owner));
    }
    let standing = record_standing(
        label_owner(image, &record.instance),
        crate::gc::runtime_pins::is_pinned(image),
        record.names.contains(&image.name),
    );
    let remove = match standing {
        RecordStanding::Foreign if record.adopted => return Err(()),
        // Before adoption this instance's labels count as recorded (its first reconcile would
        // take them).
        RecordStanding::Own | RecordStanding::Foreign | RecordStanding::Orphaned => true,
        RecordStanding::OtherInstance => instance.is_none(),
        RecordStanding::Cleared | RecordStanding::NotImagekeepers => false,
    };
    Ok(remove.then_some(owner))
}

async fn remove_labels(
    client: &ContainerdImages,
    dry_run: bool,
    instance: Option<&str>,
    record: Option<&LabelRecord>,
) -> Result<RemovedPinLabels, CriError> {
    let mut out = RemovedPinLabels::default();
    for image in client.list().await? {
        let owner = match to_remove(&image, instance, record) {
            Ok(Some(owner)) => owner,
            Ok(None) => continue,
            Err(()) => {
                out.foreign.push(image.name);
                continue;
            }
        };
        if !dry_run {
            client
                .update_labels(&image, &LabelChange::Unpin.labels(""))
                .await?;
        }
        out.removed.push(RemovedPinLabel {
            name: image.name,
            instance: owner,
        });
    }
    out.removed.sort_by(|a, b| a.name.cmp(&b.name));
    out.foreign.sort();
    Ok(out)
}

#[cfg(test)]
mod tests;
