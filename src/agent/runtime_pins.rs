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
//! cleared, see `gc::runtime_pins`). Labels are read from containerd at every reconcile and
//! only differences are written, so a steady cycle writes nothing and a failed write is
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
use crate::gc::runtime_pins::{
    CarriedKeep, LabelChange, OWN_LABEL, PinsState, carried_keeps, label_instance, other_instances,
    pinned_names, plan_label_changes, runtime_pin_answer, state_note,
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

    /// Makes containerd's labels match `keeps`: lists containerd's images, writes only the
    /// differences. Returns how many writes succeeded and failed. Does nothing unless on.
    pub async fn reconcile(&self, keeps: &[KeptImage]) -> (u64, u64) {
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
        let changes = plan_label_changes(keeps, &images, &self.instance);
        let others: BTreeMap<String, usize> = other_instances(&images, &self.instance)
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
        // The labels as they stand before this reconcile's writes, beside the CRI's list of the
        // detect just before: what containerd carries is the CRI's own `pinned` flag, and a
        // label it does not carry is a disagreement (`CarriedKeep::disagrees`).
        let carried = carried_keeps(keeps, &pinned_names(&images));
        let (mut ok, mut failed) = (0, 0);
        for (i, change) in changes {
            let image = &images[i];
            match client
                .update_labels(image, &change.labels(&self.instance))
                .await
            {
                Ok(()) => {
                    ok += 1;
                    self.counters.writes[0].fetch_add(1, Ordering::Relaxed);
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
        *self
            .carried
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = carried;
        self.set_failure(
            (failed > 0).then(|| format!("{failed} label write(s) failed (retried every cycle)")),
        );
        (ok, failed)
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
        Some(crate::telemetry::RuntimePinsSample {
            enabled,
            pinned_images: carried.values().filter(|c| c.carried).count() as u64,
            disagreeing_images: carried.values().filter(|c| c.disagrees()).count() as u64,
            other_instance_names: self.other_instances().values().sum::<usize>() as u64,
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
/// uninstall step: `imagekeeper remove-runtime-pins`). With `dry_run`, writes nothing.
/// Returns the names with whose labels they were, sorted by name.
pub async fn remove_runtime_pin_labels(
    client: &ContainerdImages,
    dry_run: bool,
    instance: Option<&str>,
) -> Result<Vec<RemovedPinLabel>, CriError> {
    let mut removed = Vec::new();
    for image in client.list().await? {
        if !image.labels.contains_key(OWN_LABEL) {
            continue;
        }
        let owner = label_instance(&image).map(str::to_owned);
        if instance.is_some_and(|wanted| owner.as_deref() != Some(wanted)) {
            continue;
        }
        if !dry_run {
            client
                .update_labels(&image, &LabelChange::Unpin.labels(""))
                .await?;
        }
        removed.push(RemovedPinLabel {
            name: image.name,
            instance: owner,
        });
    }
    removed.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(removed)
}

#[cfg(test)]
mod tests;
