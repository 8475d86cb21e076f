//! The `runtime-pin-record` check (issue 53, item 6): containerd's runtime pin labels against
//! the database's record of the names its agent labelled (schema 6's `runtime_labels`). An
//! *orphaned* name is one the agent labelled whose `io.imagekeeper.pinned` another client
//! stripped, leaving `io.cri-containerd.pinned` (the agent still clears it once the image is no
//! longer kept); a *foreign* name carries this agent's labels (its instance, or none) though
//! the agent never wrote them (forged, or the record lost), and the agent never touches it.
//! Either means another client changes imagekeeper's labels: a conflict naming the names.

use std::collections::{BTreeMap, BTreeSet};

use super::{Finding, RuntimePinsView};
use crate::gc::runtime_pin_record::{RecordStanding, record_standing};
use crate::gc::runtime_pins::LabelOwner;

/// The database's record of the names its agent labelled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordView {
    /// The names the record holds.
    pub names: BTreeSet<String>,
    /// Whether the agent adopted its labels from before the record (`runtime_labels_adopted`).
    pub adopted: bool,
}

/// Up to three of `names`, and `...` past them.
fn shown(names: &[&str]) -> String {
    let first: Vec<&str> = names.iter().take(3).copied().collect();
    match names.len() > first.len() {
        true => format!("{}, ...", first.join(", ")),
        false => first.join(", "),
    }
}

/// The check: see the module.
pub(super) fn check_runtime_pin_record(view: &RuntimePinsView) -> Finding {
    let name = "runtime-pin-record";
    let (owners, labelled) = match (&view.owners, &view.labelled) {
        (Ok(owners), Ok(labelled)) => (owners, labelled),
        (Err(why), _) | (_, Err(why)) => {
            return Finding::not_checked(
                name,
                format!("containerd's image labels were not read ({why})"),
            );
        }
    };
    let (Some(this), Some(record)) = (view.instance.as_deref(), view.record.as_ref()) else {
        // As `runtime-pin-instances` without a database: nothing of this agent's to compare.
        return Finding::ok(
            name,
            format!(
                "no record of labels written to compare (no database, or no agent has run on it); {} name(s) carry imagekeeper's labels",
                owners.len()
            ),
        );
    };
    // Each name against the record, by the reconcile's own rule.
    let own: BTreeMap<&str, Option<&str>> = owners
        .iter()
        .map(|(image, owner)| (image.as_str(), owner.as_deref()))
        .collect();
    let pinned: BTreeSet<&str> = labelled.iter().map(String::as_str).collect();
    let standings: Vec<(&str, RecordStanding)> = own
        .keys()
        .chain(&pinned)
        .copied()
        .collect::<BTreeSet<&str>>()
        .into_iter()
        .map(|name| {
            let owner = LabelOwner::of(own.get(name).copied(), this);
            let recorded = record.names.contains(name);
            (
                name,
                record_standing(owner, pinned.contains(name), recorded),
            )
        })
        .collect();
    let with = |wanted: &[RecordStanding]| -> Vec<&str> {
        standings
            .iter()
            .filter(|(_, standing)| wanted.contains(standing))
            .map(|(name, _)| *name)
            .collect()
    };
    if !record.adopted {
        // This instance's labels, recorded or not.
        let claimed = with(&[RecordStanding::Own, RecordStanding::Foreign]);
        return Finding::ok(
            name,
            format!(
                "the agent has not adopted its labels yet (its first reconcile after the upgrade to schema 6 does): {} name(s) carry instance {this}'s labels",
                claimed.len()
            ),
        );
    }
    let (orphaned, foreign) = (
        with(&[RecordStanding::Orphaned]),
        with(&[RecordStanding::Foreign]),
    );
    if orphaned.is_empty() && foreign.is_empty() {
        return Finding::ok(
            name,
            format!(
                "{} name(s) in the record of the labels instance {this} wrote; none orphaned or foreign",
                record.names.len()
            ),
        );
    }
    let mut found = Vec::new();
    if !orphaned.is_empty() {
        found.push(format!(
            "{} orphaned (labelled by this agent, io.imagekeeper.pinned stripped by another client, io.cri-containerd.pinned left: {})",
            orphaned.len(),
            shown(&orphaned)
        ));
    }
    if !foreign.is_empty() {
        found.push(format!(
            "{} foreign (carrying instance {this}'s labels, never written by it: {})",
            foreign.len(),
            shown(&foreign)
        ));
    }
    Finding::conflict(
        name,
        format!(
            "another client changes imagekeeper's runtime pin labels: {}",
            found.join("; ")
        ),
        "find what relabels containerd's images (a script, another tool running `ctr images label`); the agent clears an orphaned name's pinned label once the image is no longer kept and never touches a foreign one: remove a foreign name's labels with `ctr -n k8s.io images label NAME io.imagekeeper.pinned= io.imagekeeper.instance=` once you know whose it is".to_owned(),
    )
}
