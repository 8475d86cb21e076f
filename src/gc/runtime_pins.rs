//! The runtime pins' pure part: which containerd image names get the pinned label from what
//! the GC keeps (a keep's every name gets
//! `io.cri-containerd.pinned=pinned`, imagekeeper's own `io.imagekeeper.pinned=<why>` and
//! the writing agent's `io.imagekeeper.instance=<id>`),
//! which kept images the CRI carries as pinned and which containerd labels pinned
//! ([`carried_keeps`]: carried is CRI ListImages' own `pinned` flag at the last detect, never
//! inferred from a label),
//! where the runtime pins stand ([`PinsState`]) and what `pins -o wide` says of a pin from
//! the last reconcile ([`runtime_pin_answer`]). The agent lists containerd's labels, calls
//! the plan and writes the labels (`agent/runtime_pins.rs`); nothing here does I/O.
//!
//! The plan itself is `gc::runtime_pin_record` (schema 6): it changes only the names the
//! agent's record says it labelled, whatever their labels claim.
//!
//! Invariants: a pin imagekeeper did not set (containerd's sandbox image pin, an operator's
//! `ctr images label`) or another instance set is never cleared, and a name already pinned by
//! someone else is left as it is (it is carried); the plan holds only differences, so a
//! steady cycle writes nothing.

use std::collections::BTreeMap;

use super::{KeepReason, KeptImage};
use crate::model::RecordKey;
use crate::runtime::LabelledImage;

/// containerd's CRI plugin lists an image with this label (value [`PINNED_VALUE`]) as pinned.
pub const PINNED_LABEL: &str = "io.cri-containerd.pinned";
/// The value of [`PINNED_LABEL`] containerd reads as pinned (any other value is not a pin).
pub const PINNED_VALUE: &str = "pinned";
/// imagekeeper's own label beside [`PINNED_LABEL`]: its value says why it keeps the image
/// ([`KeepReason::label_value`]). Only a name the agent's record of what it labelled holds is
/// ever unpinned (`gc::runtime_pin_record`), whatever its labels say.
pub const OWN_LABEL: &str = "io.imagekeeper.pinned";
/// Whose [`OWN_LABEL`] it is: the instance of the agent that wrote it (its database's
/// `instance_id`, 16 hex digits). An agent changes only its own instance's labels (and adopts
/// a label written before instances were named), so two agents on one containerd (a second
/// install, a `run --db other.redb` while debugging) leave each other's pins alone.
pub const INSTANCE_LABEL: &str = "io.imagekeeper.instance";

/// Whose imagekeeper label a containerd image name carries, seen from one instance.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LabelOwner<'a> {
    /// No [`OWN_LABEL`]: not imagekeeper's (a pin on it is someone else's).
    NotImagekeepers,
    /// This instance's.
    Mine,
    /// [`OWN_LABEL`] without [`INSTANCE_LABEL`]: written before instances were named;
    /// adopted (rewritten with this instance, or removed when not kept).
    Unnamed,
    /// Another instance's: carried when pinned, never changed.
    Other(&'a str),
}

/// The instance `image`'s [`INSTANCE_LABEL`] names; `None` when it has none (or an empty one).
pub fn label_instance(image: &LabelledImage) -> Option<&str> {
    image
        .labels
        .get(INSTANCE_LABEL)
        .map(String::as_str)
        .filter(|owner| !owner.is_empty())
}

/// Whose imagekeeper label `image` carries, seen from `instance`.
pub fn label_owner<'a>(image: &'a LabelledImage, instance: &str) -> LabelOwner<'a> {
    LabelOwner::of(
        image
            .labels
            .contains_key(OWN_LABEL)
            .then(|| label_instance(image)),
        instance,
    )
}

impl<'a> LabelOwner<'a> {
    /// The owner of a name whose [`OWN_LABEL`] is `own` (`None`: absent; `Some(instance)`:
    /// present, with the instance its [`INSTANCE_LABEL`] names, if any), seen from `instance`.
    pub fn of(own: Option<Option<&'a str>>, instance: &str) -> LabelOwner<'a> {
        match own {
            None => LabelOwner::NotImagekeepers,
            Some(None) => LabelOwner::Unnamed,
            Some(Some(owner)) if owner == instance => LabelOwner::Mine,
            Some(Some(owner)) => LabelOwner::Other(owner),
        }
    }
}

/// How many of containerd's names carry each other instance's labels (not `instance`'s).
pub fn other_instances<'a>(
    images: &'a [LabelledImage],
    instance: &str,
) -> BTreeMap<&'a str, usize> {
    let mut others = BTreeMap::new();
    for image in images {
        if let LabelOwner::Other(owner) = label_owner(image, instance) {
            *others.entry(owner).or_insert(0) += 1;
        }
    }
    others
}

/// One label write the reconcile plans for one containerd image name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LabelChange {
    /// Set `io.cri-containerd.pinned=pinned` and `io.imagekeeper.pinned=<why>`.
    Pin(KeepReason),
    /// Remove both labels (the name carries imagekeeper's own).
    Unpin,
}

impl LabelChange {
    /// The labels to send for `instance` (the writing agent's): an empty value removes the
    /// label.
    pub fn labels(self, instance: &str) -> [(&'static str, &str); 3] {
        match self {
            LabelChange::Pin(why) => [
                (PINNED_LABEL, PINNED_VALUE),
                (OWN_LABEL, why.label_value()),
                (INSTANCE_LABEL, instance),
            ],
            LabelChange::Unpin => [(PINNED_LABEL, ""), (OWN_LABEL, ""), (INSTANCE_LABEL, "")],
        }
    }
}

/// The names of the kept images, each with why it is kept (a name listed under two kept
/// images keeps the first one's reason).
pub fn wanted_names(keeps: &[KeptImage]) -> BTreeMap<&str, KeepReason> {
    let mut wanted = BTreeMap::new();
    for kept in keeps {
        for name in &kept.names {
            wanted.entry(name.as_str()).or_insert(kept.why);
        }
    }
    wanted
}

/// Whether containerd lists `image` as pinned: it carries [`PINNED_LABEL`] with
/// [`PINNED_VALUE`], set by imagekeeper or anyone.
pub fn is_pinned(image: &LabelledImage) -> bool {
    image.labels.get(PINNED_LABEL).map(String::as_str) == Some(PINNED_VALUE)
}

/// Each of containerd's image names and whether it is pinned ([`is_pinned`]); the reconcile
/// updates it with each label write that succeeds.
pub fn pinned_names(images: &[LabelledImage]) -> BTreeMap<&str, bool> {
    images
        .iter()
        .map(|image| (image.name.as_str(), is_pinned(image)))
        .collect()
}

/// One kept image as the runtime pins saw it at the last detect and the reconcile right after
/// it: why it is kept, whether CRI ListImages listed it `pinned: true` (what the kubelet's
/// image GC and eviction manager read), and whether containerd's pinned label was on one of
/// its names (read by that reconcile before its writes, so both are as they stood at the same
/// moment).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CarriedKeep {
    /// What keeps it.
    pub why: KeepReason,
    /// CRI ListImages listed it `pinned: true` at the last detect: the runtime carries it.
    pub carried: bool,
    /// One of its names carried [`PINNED_LABEL`]`=`[`PINNED_VALUE`] at the reconcile after
    /// that detect, before its writes.
    pub labelled: bool,
}

impl CarriedKeep {
    /// containerd's label and the CRI's list disagree: containerd before 1.7.10 does not carry
    /// a label added to (or removed from) an image already present into the CRI's `pinned`
    /// flag (containerd issue 9328, fixed by PR 9338 and in 1.7 by PR 9381, release 1.7.10).
    pub fn disagrees(&self) -> bool {
        self.carried != self.labelled
    }
}

/// Each kept image with why it is kept, whether the CRI carries it (its `pinned` flag in the
/// ListImages of the detect that found it kept, [`KeptImage::listed_pinned`]) and whether any
/// of its names is labelled pinned in `labelled` (as [`pinned_names`] gives of containerd's
/// labels read before the writes). A name containerd does not store is not labelled.
pub fn carried_keeps(
    keeps: &[KeptImage],
    labelled: &BTreeMap<&str, bool>,
) -> BTreeMap<RecordKey, CarriedKeep> {
    keeps
        .iter()
        .map(|kept| {
            let any = kept
                .names
                .iter()
                .any(|name| labelled.get(name.as_str()).copied().unwrap_or(false));
            (
                kept.key.clone(),
                CarriedKeep {
                    why: kept.why,
                    carried: kept.listed_pinned,
                    labelled: any,
                },
            )
        })
        .collect()
}

/// Where the runtime pins stand.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PinsState {
    /// `auto`, and the runtime has not answered Version yet.
    Undecided,
    /// Labels are written.
    On,
    /// No label is written; why.
    Off(String),
}

/// Why nothing is known of the runtime's pins in `state`; `None` when they are on.
pub fn state_note(state: &PinsState) -> Option<String> {
    match state {
        PinsState::Undecided => Some(
            "unknown: the runtime has not said its version yet (runtime pins undecided)".to_owned(),
        ),
        PinsState::Off(why) => Some(format!("runtime pins off: {why}")),
        PinsState::On => None,
    }
}

/// Why whether the runtime carries `view`'s pin is not known before any image is looked at:
/// runtime pins off or undecided, the pin expired, no image on the node named by it.
fn unknown_whatever_the_runtime_says(
    state: &PinsState,
    view: &crate::gc::PinView,
) -> Option<String> {
    if let Some(note) = state_note(state) {
        return Some(note);
    }
    if !view.active {
        return Some("the pin has expired".to_owned());
    }
    if view.image_ids.is_empty() {
        return Some("no image on the node matches the pin".to_owned());
    }
    None
}

/// Whether the runtime carries `view`'s pin as CRI ListImages (`listed`) says it, what the
/// kubelet's image GC and eviction manager read: `Some(true)` when every image the pin names is
/// listed `pinned: true`, `Some(false)` when one is listed unpinned, `None` with why (the note;
/// empty exactly when known) when it is not known: runtime pins off or undecided, the pin
/// expired, no image named, an image no longer listed.
pub fn runtime_pin_answer_listed(
    state: &PinsState,
    listed: &[crate::model::RuntimeImage],
    view: &crate::gc::PinView,
) -> (Option<bool>, String) {
    if let Some(note) = unknown_whatever_the_runtime_says(state, view) {
        return (None, note);
    }
    let mut unpinned = 0usize;
    for id in &view.image_ids {
        let image = listed
            .iter()
            .find(|i| &i.id == id && i.runtime_handler == view.key.runtime_handler);
        match image {
            Some(image) if image.pinned => {}
            Some(_) => unpinned += 1,
            None => {
                return (
                    None,
                    format!("unknown: the runtime no longer lists image {}", id.as_str()),
                );
            }
        }
    }
    (Some(unpinned == 0), String::new())
}

/// Whether the runtime carries a pin's images, from the runtime pins' `state` and the last
/// reconcile's `carried` map (CRI ListImages' `pinned` flag at the last detect): `Some` only
/// when pins are on, the pin is active, names images on the node and every one of them was
/// reconciled; else `None` with why (the note). The third value is whether containerd's
/// pinned label was on every one of them at that reconcile (`Some` exactly when the first
/// is): a `Some(false)` beside `Some(true)` is a label the CRI does not carry.
pub fn runtime_pin_answer(
    state: &PinsState,
    carried: &BTreeMap<RecordKey, CarriedKeep>,
    view: &crate::gc::PinView,
) -> (Option<bool>, String, Option<bool>) {
    if let Some(note) = unknown_whatever_the_runtime_says(state, view) {
        return (None, note, None);
    }
    let (mut all, mut labelled) = (true, true);
    for id in &view.image_ids {
        let key = RecordKey {
            image_id: id.clone(),
            runtime_handler: view.key.runtime_handler.clone(),
        };
        match carried.get(&key) {
            Some(c) => {
                all &= c.carried;
                labelled &= c.labelled;
            }
            None => {
                return (
                    None,
                    "unknown: not reconciled since the image was seen (next cycle)".to_owned(),
                    None,
                );
            }
        }
    }
    (Some(all), String::new(), Some(labelled))
}

/// The RUNTIME PINNED column of `pins -o wide` and `inspect explain -o wide`: `yes` or `no`
/// as CRI ListImages listed the images at the last detect, with the disagreement named when
/// containerd's pinned label says otherwise; else the note (why it is not known).
pub fn runtime_pinned_text(pinned: Option<bool>, labelled: Option<bool>, note: &str) -> String {
    match (pinned, labelled) {
        (Some(true), Some(false)) => "yes (listed pinned: true, with no pinned label)".to_owned(),
        (Some(true), _) => "yes".to_owned(),
        (Some(false), Some(true)) => {
            "no (labelled pinned, but CRI ListImages lists it pinned: false)".to_owned()
        }
        (Some(false), _) => "no".to_owned(),
        (None, _) => note.to_owned(),
    }
}

#[cfg(test)]
mod tests;
