//! The runtime pins' plan against the record of what the agent labelled (issue 53, item 6):
//! schema 6's `runtime_labels` table, one row per containerd image name the agent wrote its
//! labels on ([`RuntimeLabel`]). Ownership is the record's, not the labels': a name is the
//! agent's to change or clear only when the record holds it, so a label another client forged
//! (`io.imagekeeper.pinned` and this instance on the sandbox image's name) is never taken for
//! the agent's own, and one whose `io.imagekeeper.pinned` another client stripped is still
//! known to be the agent's. Nothing here does I/O: the agent reads the labels and the record,
//! calls [`plan_with_record`], writes the record's rows (durably) before the label writes they
//! stand for, and removes a row only after its labels are gone (`agent/runtime_pins.rs`).
//!
//! Per name, against the record:
//! - recorded, still carrying this instance's labels: pinned again when kept (only the
//!   differences), unpinned when not;
//! - recorded, `io.imagekeeper.pinned` stripped while `io.cri-containerd.pinned=pinned`
//!   stays: *orphaned*, reported; the agent wrote that pinned label, so it labels it again
//!   while kept and clears it once no longer kept (else it stays forever: nobody else clears
//!   it);
//! - recorded, the pinned label gone and none of the agent's labels left: the row is forgotten
//!   (a crash between a row's write and its label's leaves this too); now another instance's
//!   labels: forgotten, left alone; containerd no longer lists the name: forgotten;
//! - not recorded, labelled as this instance's (or with no instance): *foreign* (forged, or
//!   the record lost), reported and never touched; a kept name not pinned by anyone is pinned
//!   and recorded (even over such a label);
//! - adoption, once per database file (the first reconcile of schema 6, `adopt`): every name
//!   labelled as this instance's or with no instance goes into the record as it stands, so an
//!   agent upgraded from schema 5 clears the labels it wrote before the record existed.

use std::collections::{BTreeMap, BTreeSet};

use super::runtime_pins::{
    LabelChange, LabelOwner, OWN_LABEL, is_pinned, label_owner, wanted_names,
};
use super::{KeepReason, KeptImage};
use crate::model::{RuntimeLabel, UnixNanos};
use crate::runtime::LabelledImage;

/// How one of containerd's names stands against the record of the names an instance's agent
/// labelled: the one definition of *orphaned* and *foreign* the reconcile, `doctor` and
/// `remove-runtime-pins` share.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordStanding {
    /// Recorded, carrying the instance's labels (or unnamed ones): the agent's own.
    Own,
    /// Recorded; `io.imagekeeper.pinned` stripped by another client while
    /// `io.cri-containerd.pinned=pinned` stays.
    Orphaned,
    /// Recorded; neither the agent's labels nor the pinned label left.
    Cleared,
    /// Not recorded, yet carrying the instance's labels (or unnamed ones): forged, or the
    /// record lost.
    Foreign,
    /// Another instance's labels, recorded or not.
    OtherInstance,
    /// Not recorded, and no imagekeeper label.
    NotImagekeepers,
}

/// How a name whose labels are `owner`'s (seen from the record's instance), pinned or not,
/// recorded or not, stands.
pub fn record_standing(owner: LabelOwner<'_>, pinned: bool, recorded: bool) -> RecordStanding {
    match (owner, recorded) {
        (LabelOwner::Other(_), _) => RecordStanding::OtherInstance,
        (LabelOwner::Mine | LabelOwner::Unnamed, true) => RecordStanding::Own,
        (LabelOwner::Mine | LabelOwner::Unnamed, false) => RecordStanding::Foreign,
        (LabelOwner::NotImagekeepers, true) if pinned => RecordStanding::Orphaned,
        (LabelOwner::NotImagekeepers, true) => RecordStanding::Cleared,
        (LabelOwner::NotImagekeepers, false) => RecordStanding::NotImagekeepers,
    }
}

/// What one reconcile does with the record and the labels, and what it found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecordPlan {
    /// Rows to write before any label write: each adopted name's, and each pin's.
    pub put: Vec<(String, RuntimeLabel)>,
    /// Rows to delete with no label write: nothing of the agent's is left on the name, or
    /// containerd no longer lists it.
    pub forget: Vec<String>,
    /// The label writes, by index into the images; an `Unpin`'s row goes once it succeeds.
    pub changes: Vec<(usize, LabelChange)>,
    /// Recorded names whose `io.imagekeeper.pinned` was stripped, the pinned label left.
    pub orphaned: Vec<String>,
    /// Names labelled as this instance's (or with no instance) the record does not hold:
    /// never touched.
    pub foreign: Vec<String>,
    /// This plan adopts (`runtime_labels_adopted` is written with its rows).
    pub adopts: bool,
}

/// The plan that makes containerd's `images` carry `keeps` for the agent of `instance`,
/// changing only names `record` holds (and, with `adopt`, adopting this instance's labels
/// first); `now` stamps the rows it writes. See the module's rules.
pub fn plan_with_record(
    keeps: &[KeptImage],
    images: &[LabelledImage],
    instance: &str,
    record: &BTreeMap<String, RuntimeLabel>,
    adopt: bool,
    now: UnixNanos,
) -> RecordPlan {
    let wanted = wanted_names(keeps);
    let mut plan = RecordPlan {
        adopts: adopt,
        ..RecordPlan::default()
    };
    let mut listed = BTreeSet::new();
    for (i, image) in images.iter().enumerate() {
        listed.insert(image.name.as_str());
        let owner = label_owner(image, instance);
        let mine = matches!(owner, LabelOwner::Mine | LabelOwner::Unnamed);
        let mut recorded = record.contains_key(&image.name);
        if recorded && matches!(owner, LabelOwner::Other(_)) {
            // Another instance's labels now: not the agent's any more.
            plan.forget.push(image.name.clone());
            recorded = false;
        } else if !recorded && adopt && mine {
            let value = image.labels.get(OWN_LABEL).cloned().unwrap_or_default();
            plan.put.push((image.name.clone(), label(value, now)));
            recorded = true;
        }
        let why = wanted.get(image.name.as_str()).copied();
        let standing = record_standing(owner, is_pinned(image), recorded);
        match recorded {
            true => plan_recorded(&mut plan, (i, image), why, (owner, standing), now),
            false => plan_unrecorded(&mut plan, (i, image), why, standing, now),
        }
    }
    plan.forget.extend(
        record
            .keys()
            .filter(|name| !listed.contains(name.as_str()))
            .cloned(),
    );
    plan
}

fn label(value: String, now: UnixNanos) -> RuntimeLabel {
    RuntimeLabel {
        written_at: now,
        value,
    }
}

/// Pins `image` for `why`: its row first, then the label write.
fn pin(
    plan: &mut RecordPlan,
    (i, image): (usize, &LabelledImage),
    why: KeepReason,
    now: UnixNanos,
) {
    let row = label(why.label_value().to_owned(), now);
    plan.put.push((image.name.clone(), row));
    plan.changes.push((i, LabelChange::Pin(why)));
}

/// A name the record holds: the agent's to change.
fn plan_recorded(
    plan: &mut RecordPlan,
    (i, image): (usize, &LabelledImage),
    why: Option<KeepReason>,
    (owner, standing): (LabelOwner<'_>, RecordStanding),
    now: UnixNanos,
) {
    if standing == RecordStanding::Orphaned {
        plan.orphaned.push(image.name.clone());
    }
    let value = image.labels.get(OWN_LABEL).map(String::as_str);
    match why {
        Some(why)
            if is_pinned(image)
                && owner == LabelOwner::Mine
                && value == Some(why.label_value()) => {}
        Some(why) => pin(plan, (i, image), why, now),
        None if standing != RecordStanding::Cleared => {
            plan.changes.push((i, LabelChange::Unpin));
        }
        None => plan.forget.push(image.name.clone()),
    }
}

/// A name the record does not hold: pinned only when kept and pinned by nobody; a label that
/// claims to be this instance's is reported, never changed.
fn plan_unrecorded(
    plan: &mut RecordPlan,
    (i, image): (usize, &LabelledImage),
    why: Option<KeepReason>,
    standing: RecordStanding,
    now: UnixNanos,
) {
    match why {
        Some(why) if !is_pinned(image) => pin(plan, (i, image), why, now),
        _ if standing == RecordStanding::Foreign => plan.foreign.push(image.name.clone()),
        _ => {}
    }
}

#[cfg(test)]
mod tests;
