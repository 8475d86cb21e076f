//! What `inspect explain` says of each kept image: whether the runtime carries imagekeeper's
//! keep of it as pinned (CRI ListImages `pinned: true`, which the kubelet's image GC and
//! eviction manager obey: kubelet master `pkg/kubelet/images/image_gc_manager.go`,
//! `imagesInEvictionOrder`), as the running agent's last runtime-pins reconcile found it, or
//! why that is not known. The answers and notes are `pins -o wide`'s
//! ([`super::PinView::runtime_pinned`]).
//!
//! Invariants: only a kept image gets an answer (an operator's pin, a present warm entry or an
//! irreplaceable image, as explain judged it or as the running agent keeps it); the answer is
//! `Some(bool)` only from the agent's reconcile with runtime pins on, else `None` with a note
//! saying why it is not known.

use std::collections::BTreeMap;

use super::explain::{Decision, Explanation, RuntimePinStatus};
use super::protect::KeepReason;
use crate::model::RecordKey;

/// What is known of the runtime's pins.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RuntimePinsSeen {
    /// The running agent's last reconcile, runtime pins on: each image it keeps, why, whether
    /// CRI ListImages listed it pinned at the last detect and whether it was labelled pinned.
    Reconciled(BTreeMap<RecordKey, super::runtime_pins::CarriedKeep>),
    /// Not known, and why (no running agent, runtime pins off, another database, ...); with
    /// the images the running agent keeps, when it said (runtime pins off: it still knows
    /// them, e.g. a warm entry the database alone does not show).
    Unknown {
        /// Why it is not known.
        note: String,
        /// The images the running agent keeps, when it said.
        agent_keeps: BTreeMap<RecordKey, KeepReason>,
    },
}

impl RuntimePinsSeen {
    /// Not known, and why, with no keeps of an agent's.
    pub fn unknown(note: impl Into<String>) -> RuntimePinsSeen {
        RuntimePinsSeen::Unknown {
            note: note.into(),
            agent_keeps: BTreeMap::new(),
        }
    }
}

/// The note of a kept image the agent's last reconcile did not keep.
pub const NOT_AMONG_AGENT_KEEPS: &str = "unknown: not among the running agent's keeps at its \
    last reconcile (kept since its last cycle, or its settings differ from these flags)";

/// Notes on each kept image of `explanation` whether the runtime carries its keep.
pub fn note_runtime_pins(explanation: &mut Explanation, seen: &RuntimePinsSeen) {
    for image in &mut explanation.images {
        let own = image
            .protection
            .as_ref()
            .map(KeepReason::of)
            .or(match image.decision {
                Decision::KeepWarm => Some(KeepReason::Warm),
                Decision::KeepNeededByPod => Some(KeepReason::NeededByPod),
                _ => None,
            });
        image.runtime_pin = match seen {
            RuntimePinsSeen::Reconciled(keeps) => match (keeps.get(&image.key), own) {
                (Some(keep), _) => Some(RuntimePinStatus {
                    keep: keep.why,
                    runtime_pinned: Some(keep.carried),
                    runtime_pin_note: String::new(),
                    runtime_labelled: Some(keep.labelled),
                }),
                (None, Some(why)) => Some(RuntimePinStatus {
                    keep: why,
                    runtime_pinned: None,
                    runtime_pin_note: NOT_AMONG_AGENT_KEEPS.to_owned(),
                    runtime_labelled: None,
                }),
                (None, None) => None,
            },
            RuntimePinsSeen::Unknown { note, agent_keeps } => agent_keeps
                .get(&image.key)
                .copied()
                .or(own)
                .map(|why| RuntimePinStatus {
                    keep: why,
                    runtime_pinned: None,
                    runtime_pin_note: note.clone(),
                    runtime_labelled: None,
                }),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gc::explain::explain;
    use crate::gc::{GcPolicy, Protection};
    use crate::model::{ImageRecord, UnixNanos};
    use crate::store::StoredRecord;

    /// Four images: `pin` (an operator's pin), `warm` (a warm entry, not in use), `side` (no
    /// repo digest) and `plain` (not kept), explained offline.
    fn explained() -> Explanation {
        let records: Vec<StoredRecord> = ["pin", "warm", "side", "plain"]
            .iter()
            .map(|id| StoredRecord {
                key: RecordKey::new(format!("sha256:{id}"), ""),
                record: ImageRecord {
                    first_detected: UnixNanos::from_secs(1),
                    last_used: UnixNanos::from_secs(1),
                    size: 1,
                    pinned: false,
                },
            })
            .collect();
        let mut e = explain(
            &records,
            None,
            GcPolicy::default(),
            None,
            UnixNanos::from_secs(1_000),
        );
        for image in &mut e.images {
            match image.key.image_id.as_str() {
                "sha256:pin" => {
                    image.protection = Some(Protection::Pinned {
                        image: "app:1".to_owned(),
                        until: None,
                        reason: String::new(),
                    });
                }
                "sha256:warm" => image.decision = Decision::KeepWarm,
                "sha256:side" => image.protection = Some(Protection::NoRepoDigest),
                _ => {}
            }
        }
        e
    }

    /// An image's answer: (keep, runtime_pinned, note).
    type Answer<'a> = Option<(KeepReason, Option<bool>, &'a str)>;

    fn answers(e: &Explanation) -> Vec<(&str, Answer<'_>)> {
        e.images
            .iter()
            .map(|i| {
                (
                    i.key.image_id.as_str().trim_start_matches("sha256:"),
                    i.runtime_pin
                        .as_ref()
                        .map(|p| (p.keep, p.runtime_pinned, p.runtime_pin_note.as_str())),
                )
            })
            .collect()
    }

    #[test]
    fn each_kept_image_says_whether_the_runtime_carries_it_and_why_not_when_unknown() {
        use KeepReason::*;
        let key = |id: &str| RecordKey::new(format!("sha256:{id}"), "");
        let offline = RuntimePinsSeen::unknown(crate::gc::RUNTIME_PIN_OFFLINE);
        // The agent keeps `pin` (carried), `side` (not carried) and `plain` (a warm entry this
        // offline explain cannot see), and not `warm` (dropped since its last cycle).
        let keep = |why, carried| crate::gc::runtime_pins::CarriedKeep {
            why,
            carried,
            labelled: true,
        };
        let agent = RuntimePinsSeen::Reconciled(
            [
                (key("pin"), keep(Pin, true)),
                (key("side"), keep(NoRepoDigest, false)),
                (key("plain"), keep(Warm, true)),
            ]
            .into_iter()
            .collect(),
        );
        let mut e = explained();
        note_runtime_pins(&mut e, &offline);
        let note = crate::gc::RUNTIME_PIN_OFFLINE;
        assert_eq!(
            answers(&e),
            vec![
                ("pin", Some((Pin, None, note))),
                ("warm", Some((Warm, None, note))),
                ("side", Some((NoRepoDigest, None, note))),
                ("plain", None),
            ],
            "offline: every kept image is unknown, with why; an image not kept says nothing"
        );
        note_runtime_pins(&mut e, &agent);
        assert_eq!(
            answers(&e),
            vec![
                ("pin", Some((Pin, Some(true), ""))),
                ("warm", Some((Warm, None, NOT_AMONG_AGENT_KEEPS))),
                ("side", Some((NoRepoDigest, Some(false), ""))),
                ("plain", Some((Warm, Some(true), ""))),
            ],
            "through the agent: its reconcile's answer and reason, else why not known"
        );
        // Runtime pins off: nothing is known, the note says so, and the agent's keeps (a warm
        // entry the file alone does not show) are still named.
        let off = RuntimePinsSeen::Unknown {
            note: "runtime pins off: containerd 1.6.20".to_owned(),
            agent_keeps: [(key("plain"), Warm)].into_iter().collect(),
        };
        note_runtime_pins(&mut e, &off);
        let note = "runtime pins off: containerd 1.6.20";
        assert_eq!(
            answers(&e),
            vec![
                ("pin", Some((Pin, None, note))),
                ("warm", Some((Warm, None, note))),
                ("side", Some((NoRepoDigest, None, note))),
                ("plain", Some((Warm, None, note))),
            ],
        );
    }
}
