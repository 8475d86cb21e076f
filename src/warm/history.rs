//! Restore after a wipe: the images the journal says someone else removed (a runtime wipe, a
//! reimaged disk, another tool's GC: `Remover::External`) and that have not come back, used
//! within a window, most recently used first, within a byte budget. `imagekeeper restore`
//! pulls them back; `[warmFromHistory]` makes them warm entries ([`history_entries`]), which
//! pull them back and keep them warm once back, until their last use plus the window.
//!
//! Invariants: an imagekeeper removal is never restored (the GC chose it); an entry marked
//! re-pulled is already back; an image with no name stored cannot be pulled and is listed as
//! skipped; each record key counts once, at its latest removal.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;

use crate::model::{ImageNames, JournalEntry, RecordKey, Remover, UnixNanos};
use crate::store::JournalKey;

use super::{WarmEntry, WarmPlan, WarmState};

/// `[warmFromHistory]` / `restore`'s window and budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct FromHistory {
    /// Only images last used at most this long before now.
    pub used_within: Duration,
    /// At most this many bytes in all; `None`: no budget.
    pub max_bytes: Option<u64>,
}

/// The default window of `restore` and `[warmFromHistory]`.
pub const DEFAULT_USED_WITHIN: Duration = Duration::from_secs(24 * 3600);

/// One image the journal says was removed externally and used within the window.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RestoreCandidate {
    /// The image's record key.
    pub key: RecordKey,
    /// The name it is pulled back by: a repo digest (exactly that image) if stored, else a tag.
    pub image: Option<String>,
    /// Its size in bytes.
    pub size: u64,
    /// When it was last used.
    pub last_used: UnixNanos,
    /// When it was removed.
    pub removed_at: UnixNanos,
    /// Why it is left out (no name to pull it by, over the byte budget); `None`: restored.
    pub skipped: Option<String>,
}

impl RestoreCandidate {
    /// The warm entry that pulls it back (its journal size as the size).
    pub fn entry(&self) -> Option<WarmEntry> {
        Some(WarmEntry {
            image: self.image.clone()?,
            runtime_handler: self.key.runtime_handler.clone(),
            until: None,
            lifetime: None,
            size_hint: Some(self.size),
            origin: "history".into(),
        })
    }
}

/// The candidates at `now`, most recently used first (ties: latest removal first): from the
/// journal's entries and each key's stored names.
pub fn restore_candidates(
    journal: &[(JournalKey, JournalEntry)],
    names: &dyn Fn(&RecordKey) -> Option<ImageNames>,
    now: UnixNanos,
    window: FromHistory,
) -> Vec<RestoreCandidate> {
    candidates(journal, names, now, window, false)
}

/// The warm entries `[warmFromHistory]` makes at `now`: every image the journal says was
/// removed externally and last used within the window, whether it is back or not (a missing
/// one is pulled back; one back is kept warm), most recently used first, within the byte
/// budget (which counts the images back too). Each entry keeps its image until its last use
/// (before the removal) plus `usedWithin`: then it expires, so GC may take the image and
/// nothing pulls it back (no pull/remove loop).
pub fn history_entries(
    journal: &[(JournalKey, JournalEntry)],
    names: &dyn Fn(&RecordKey) -> Option<ImageNames>,
    now: UnixNanos,
    window: FromHistory,
) -> Vec<WarmEntry> {
    candidates(journal, names, now, window, true)
        .iter()
        .filter(|c| c.skipped.is_none())
        .filter_map(|c| {
            let mut entry = c.entry()?;
            entry.until = Some(c.last_used.saturating_add(window.used_within));
            Some(entry)
        })
        .collect()
}

/// What restore does with one candidate ([`restore_step`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RestoreStep {
    /// Pull the image back by this name.
    Pull(String),
    /// Nothing to pull: the item's state and detail.
    Settled(RestoreState, String),
}

/// What restore does with `candidate`, given `planned`, the warm plan of the candidates'
/// entries: a skipped candidate stays skipped with its reason; one the plan does not hold
/// (another removal of the same name comes first) is skipped; present is present; does not
/// fit is said with the plan's detail; a planned pull is pulled (a dry run says it would
/// restore); anything else is skipped with the plan's detail.
pub fn restore_step(
    candidate: &RestoreCandidate,
    planned: &WarmPlan,
    dry_run: bool,
) -> RestoreStep {
    let image = candidate.image.clone().unwrap_or_default();
    let status = planned.statuses.iter().find(|s| {
        s.entry.image == image && s.entry.runtime_handler == candidate.key.runtime_handler
    });
    match (&candidate.skipped, status) {
        (Some(why), _) => RestoreStep::Settled(RestoreState::Skipped, why.clone()),
        (None, None) => RestoreStep::Settled(
            RestoreState::Skipped,
            "another removal of the same name comes first".to_owned(),
        ),
        (None, Some(status)) => match status.state {
            WarmState::Present => RestoreStep::Settled(RestoreState::Present, String::new()),
            WarmState::DoesNotFit => {
                RestoreStep::Settled(RestoreState::DoesNotFit, status.detail.clone())
            }
            WarmState::Pulling if dry_run => {
                RestoreStep::Settled(RestoreState::WouldRestore, String::new())
            }
            WarmState::Pulling => RestoreStep::Pull(image),
            _ => RestoreStep::Settled(RestoreState::Skipped, status.detail.clone()),
        },
    }
}

/// [`restore_candidates`], with the images already back too when `back` is set.
fn candidates(
    journal: &[(JournalKey, JournalEntry)],
    names: &dyn Fn(&RecordKey) -> Option<ImageNames>,
    now: UnixNanos,
    window: FromHistory,
    back: bool,
) -> Vec<RestoreCandidate> {
    let since = now.saturating_sub(window.used_within);
    // The latest external removal of each key.
    let mut latest: BTreeMap<&RecordKey, (&JournalKey, &JournalEntry)> = BTreeMap::new();
    for (jk, entry) in journal {
        if entry.remover != Remover::External {
            continue;
        }
        match latest.get(&jk.key) {
            Some((k, _)) if k.removed_at >= jk.removed_at => {}
            _ => {
                latest.insert(&jk.key, (jk, entry));
            }
        }
    }
    let mut out: Vec<RestoreCandidate> = latest
        .into_values()
        .filter(|(_, e)| back || e.repulled_at.is_none())
        .filter(|(_, e)| e.last_used != UnixNanos::NEVER && e.last_used >= since)
        .map(|(jk, e)| {
            // A name with `user:password@` (a runtime that reported one) is never pulled by,
            // shown nor stored: the first name without.
            let image = names(&jk.key).and_then(|n| {
                let clean = |names: &[String]| {
                    names
                        .iter()
                        .find(|name| crate::reference::refuse_credentials(name).is_ok())
                        .cloned()
                };
                clean(&n.repo_digests).or_else(|| clean(&n.repo_tags))
            });
            RestoreCandidate {
                key: jk.key.clone(),
                skipped: image
                    .is_none()
                    .then(|| "no name is stored to pull it by".to_owned()),
                image,
                size: e.size,
                last_used: e.last_used,
                removed_at: jk.removed_at,
            }
        })
        .collect();
    out.sort_by(|a, b| {
        (b.last_used, b.removed_at, &a.key).cmp(&(a.last_used, a.removed_at, &b.key))
    });
    if let Some(budget) = window.max_bytes {
        let mut taken: u64 = 0;
        for c in out.iter_mut().filter(|c| c.skipped.is_none()) {
            match taken.checked_add(c.size) {
                Some(total) if total <= budget => taken = total,
                _ => c.skipped = Some("over the byte budget (--max-bytes)".to_owned()),
            }
        }
    }
    out
}

/// What `restore` is asked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RestoreOptions {
    /// The window: only images used within it are considered.
    pub used_within: Duration,
    /// At most this many bytes are pulled back; `None`: no cap.
    pub max_bytes: Option<u64>,
    /// Say what would be pulled, pull nothing.
    pub dry_run: bool,
}

/// What became of one image `restore` considered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum RestoreState {
    /// Pulled back.
    Restored,
    /// A dry run: it would be pulled back.
    WouldRestore,
    /// It fits no longer: pulling it would take the image filesystem above the low threshold.
    DoesNotFit,
    /// No name to pull it by, or over the byte budget.
    Skipped,
    /// The pull failed.
    Failed,
    /// The runtime has it already.
    Present,
}

impl RestoreState {
    /// The state's name as text.
    pub fn as_str(self) -> &'static str {
        match self {
            RestoreState::Restored => "restored",
            RestoreState::WouldRestore => "would_restore",
            RestoreState::DoesNotFit => "does_not_fit",
            RestoreState::Skipped => "skipped",
            RestoreState::Failed => "failed",
            RestoreState::Present => "present",
        }
    }

    /// The state named `s` ([`RestoreState::as_str`]), if any.
    pub fn parse(s: &str) -> Option<RestoreState> {
        [
            RestoreState::Restored,
            RestoreState::WouldRestore,
            RestoreState::DoesNotFit,
            RestoreState::Skipped,
            RestoreState::Failed,
            RestoreState::Present,
        ]
        .into_iter()
        .find(|state| state.as_str() == s)
    }
}

/// One image `restore` considered, most recently used first.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RestoreItem {
    /// The image id.
    pub image_id: String,
    /// The runtime handler; empty for the default.
    pub runtime_handler: String,
    /// The name it is (or would be) pulled by; empty when none is stored.
    pub image: String,
    /// Its size in bytes.
    pub size: u64,
    /// When it was last used.
    pub last_used: UnixNanos,
    /// When it was removed.
    pub removed_at: UnixNanos,
    /// What became of it.
    pub state: RestoreState,
    /// Why, for every state but `restored` and `would_restore`.
    pub detail: String,
}

/// What `restore` did (or, dry, would do).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct RestoreOutcome {
    /// Each image considered, most recently used first.
    pub items: Vec<RestoreItem>,
    /// Whether it was a dry run.
    pub dry_run: bool,
    /// Items left out at the end of `items` to keep an admin answer within its limit.
    #[serde(skip_serializing_if = "crate::format::is_zero")]
    pub omitted: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::RemovalReason;

    fn removal(
        id: u8,
        removed_at: i64,
        last_used: i64,
        remover: Remover,
    ) -> (JournalKey, JournalEntry) {
        (
            JournalKey {
                removed_at: UnixNanos(removed_at),
                key: RecordKey::new(format!("sha256:{id:064x}"), ""),
            },
            JournalEntry {
                size: u64::from(id) * 100,
                first_detected: UnixNanos(1),
                last_used: UnixNanos(last_used),
                reason: (remover == Remover::Imagekeeper).then_some(RemovalReason::Space),
                rank: None,
                fs: None,
                remover,
                repulled_at: None,
            },
        )
    }

    #[test]
    fn external_removals_used_within_the_window_most_recent_first_within_the_budget() {
        let hour = 3_600_000_000_000i64;
        let now = UnixNanos(100 * hour);
        let mut journal = vec![
            removal(1, 99 * hour, 90 * hour, Remover::External),
            removal(2, 99 * hour, 95 * hour, Remover::External),
            // Removed by imagekeeper's GC: never restored.
            removal(3, 99 * hour, 98 * hour, Remover::Imagekeeper),
            // Used 30 h ago: outside 24 h.
            removal(4, 99 * hour, 70 * hour, Remover::External),
            // Already back.
            removal(5, 99 * hour, 97 * hour, Remover::External),
            // No name.
            removal(6, 99 * hour, 96 * hour, Remover::External),
            removal(7, 99 * hour, 80 * hour, Remover::External),
        ];
        journal[4].1.repulled_at = Some(UnixNanos(99 * hour + 1));
        let names = |key: &RecordKey| {
            (!key.image_id.as_str().ends_with('6')).then(|| ImageNames {
                repo_tags: vec![format!("x/{}:1", key.image_id.short())],
                repo_digests: if key.image_id.as_str().ends_with('2') {
                    vec!["x/two@sha256:2".into()]
                } else {
                    vec![]
                },
            })
        };
        let window = FromHistory {
            used_within: Duration::from_secs(24 * 3600),
            max_bytes: Some(800),
        };
        let got = restore_candidates(&journal, &names, now, window);
        let summary: Vec<(u64, Option<&str>)> = got
            .iter()
            .map(|c| (c.size / 100, c.skipped.as_deref()))
            .collect();
        assert_eq!(
            summary,
            [
                (6, Some("no name is stored to pull it by")),
                (2, None),
                (1, None),
                // 200 + 100 + 700 > 800.
                (7, Some("over the byte budget (--max-bytes)")),
            ]
        );
        assert_eq!(
            got[1].image.as_deref(),
            Some("x/two@sha256:2"),
            "a digest first"
        );
        assert!(got[0].entry().is_none());
        assert_eq!(got[2].entry().map(|e| e.size_hint), Some(Some(100)));
    }

    #[test]
    fn restore_pulls_only_what_the_plan_says_to_pull_and_says_why_of_the_rest() {
        let candidate = |image: Option<&str>, skipped: Option<&str>| RestoreCandidate {
            key: RecordKey::new("sha256:1", "kata"),
            image: image.map(str::to_owned),
            size: 100,
            last_used: UnixNanos(1),
            removed_at: UnixNanos(2),
            skipped: skipped.map(str::to_owned),
        };
        let planned = |handler: &str, state: WarmState| WarmPlan {
            statuses: vec![super::super::WarmStatus {
                entry: WarmEntry {
                    image: "x/a:1".into(),
                    runtime_handler: handler.into(),
                    until: None,
                    lifetime: None,
                    size_hint: Some(100),
                    origin: "history".into(),
                },
                state,
                size: Some(100),
                detail: format!("{} detail", state.as_str()),
            }],
        };
        let settled =
            |state: RestoreState, detail: &str| RestoreStep::Settled(state, detail.into());
        use RestoreState as R;
        use WarmState as W;
        // (what, candidate, plan, dry run, want)
        let cases = [
            (
                "skipped keeps its reason whatever the plan",
                candidate(None, Some("no name is stored to pull it by")),
                planned("kata", W::Pulling),
                false,
                settled(R::Skipped, "no name is stored to pull it by"),
            ),
            (
                "planned pull is pulled by its name",
                candidate(Some("x/a:1"), None),
                planned("kata", W::Pulling),
                false,
                RestoreStep::Pull("x/a:1".into()),
            ),
            (
                "a dry run pulls nothing",
                candidate(Some("x/a:1"), None),
                planned("kata", W::Pulling),
                true,
                settled(R::WouldRestore, ""),
            ),
            (
                "present",
                candidate(Some("x/a:1"), None),
                planned("kata", W::Present),
                false,
                settled(R::Present, ""),
            ),
            (
                "does not fit, with the plan's detail",
                candidate(Some("x/a:1"), None),
                planned("kata", W::DoesNotFit),
                false,
                settled(R::DoesNotFit, "does_not_fit detail"),
            ),
            (
                "queued is skipped with the plan's detail",
                candidate(Some("x/a:1"), None),
                planned("kata", W::Queued),
                false,
                settled(R::Skipped, "queued detail"),
            ),
            (
                "the plan's entry for another handler is not this candidate's",
                candidate(Some("x/a:1"), None),
                planned("", W::Pulling),
                false,
                settled(R::Skipped, "another removal of the same name comes first"),
            ),
        ];
        for (what, candidate, plan, dry_run, want) in cases {
            assert_eq!(restore_step(&candidate, &plan, dry_run), want, "{what}");
        }
    }
}
