//! Warm sets: the images a node keeps present ahead of use. Owns the warm entries (from the
//! config file's `[[warm]]` tables, the `--warm-set-dir` files and the journal's history),
//! what keeps an image warm for the GC ([`WarmSet::keeps`]: the config's and the directory's
//! entries; with [`WarmSet::from_history`] the GC also keeps the history's entries, read from
//! its journal at each detect, [`history_entries`]), and the disk-aware plan of one
//! warm cycle ([`plan`]), which takes `now` and the image filesystem as arguments and does no
//! I/O; the agent runs the pulls it plans (`src/agent/warm.rs`).
//!
//! Invariants: an entry whose `until` has passed keeps nothing and is never pulled; a warm
//! pull is planned only when its size is known (a record or journal entry of an image with
//! that name, else the entry's `size` hint) and fits under the GC's low lines (the low
//! threshold, the byte budget's low line; none while inode use is at or above the low inode
//! threshold) with the
//! sizes of the earlier entries planned in the same cycle, or, when its size is unknown, when
//! the image filesystem is below the low threshold and no other warm pull is planned in that
//! cycle (the next cycle sees what it took); earlier entries are judged first. An image the
//! plan leaves out for space is `DoesNotFit`, never pulled, so never pulled then collected.

mod files;
mod history;
mod plan;

use std::time::Duration;

use serde::Serialize;

use crate::model::{ImageLike, UnixNanos};
use crate::pull::image_matches;

pub use files::{
    SizeSpec, WarmEntrySpec, WarmError, WarmFile, parse_size, read_warm_dir, resolve_specs,
};
pub use history::{
    DEFAULT_USED_WITHIN, FromHistory, RestoreCandidate, RestoreItem, RestoreOptions,
    RestoreOutcome, RestoreState, history_entries, restore_candidates,
};
pub use plan::{PlanInput, WarmPlan, WarmState, WarmStatus, inodes_at_or_above_low, plan};

/// One image the node keeps warm.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct WarmEntry {
    /// The image name as a pod spec gives it (a tag or digest reference).
    pub image: String,
    /// The runtime handler it is pulled for; empty for the default.
    pub runtime_handler: String,
    /// When it stops being warm; `None`: while it is in the set (or, with `lifetime`, until
    /// [`WarmSet::stamped`] sets it).
    pub until: Option<UnixNanos>,
    /// `for`: how long it stays warm from when the agent first read it.
    pub lifetime: Option<Duration>,
    /// Its size as the operator declares it (`size`), used only when no record or journal
    /// entry of the node knows it.
    pub size_hint: Option<u64>,
    /// Where it was declared: `warm[1] in /etc/imagekeeper.toml`, `/etc/warm/gpu.yaml: warm[0]`,
    /// or `history` for `[warmFromHistory]`.
    pub origin: String,
}

impl WarmEntry {
    /// Whether the entry is in force at `now`.
    pub fn active(&self, now: UnixNanos) -> bool {
        self.until.is_none_or(|until| now < until)
    }

    /// Whether `image` is this entry's image, as the runtime resolves names, for its handler.
    pub fn matches(&self, image: &impl ImageLike) -> bool {
        image.runtime_handler() == self.runtime_handler && image_matches(&self.image, image)
    }
}

/// The warm entries in priority order (the config file's first, then the directory's files by
/// name, then history's).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WarmSet {
    pub entries: Vec<WarmEntry>,
    /// `[warmFromHistory]`: the GC also keeps, until their last use plus `usedWithin`, the
    /// images the journal says were removed externally ([`history_entries`]), so an image
    /// the warm loop pulled back is not collected as an ordinary one.
    pub from_history: Option<FromHistory>,
}

impl WarmSet {
    pub fn new(entries: Vec<WarmEntry>) -> WarmSet {
        WarmSet {
            entries,
            from_history: None,
        }
    }

    /// The set with `[warmFromHistory]`'s window (see [`WarmSet::from_history`]).
    pub fn with_from_history(mut self, from_history: Option<FromHistory>) -> WarmSet {
        self.from_history = from_history;
        self
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The set with each `for` turned into an `until` from `now`, or from when `previous`
    /// (the set before a reload) first read the same entry, so a reload that keeps an entry
    /// does not extend it.
    pub fn stamped(mut self, now: UnixNanos, previous: &WarmSet) -> WarmSet {
        for entry in &mut self.entries {
            let Some(lifetime) = entry.lifetime else {
                continue;
            };
            let before = previous.entries.iter().find(|p| {
                p.image == entry.image
                    && p.runtime_handler == entry.runtime_handler
                    && p.lifetime == entry.lifetime
            });
            entry.until = match before.and_then(|p| p.until) {
                Some(until) => Some(until),
                None => Some(now.saturating_add(lifetime)),
            };
        }
        self
    }

    /// The entry that keeps `image` warm at `now`, if any: GC, prune and DeleteUnusedImages
    /// never remove it.
    pub fn keeps(&self, image: &impl ImageLike, now: UnixNanos) -> Option<&WarmEntry> {
        self.entries
            .iter()
            .find(|e| e.active(now) && e.matches(image))
    }
}

/// The warm loop's settings (the set itself is the GC's, `GcConfig::warm`, as the GC keeps
/// what it names).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WarmConfig {
    /// `--warm-set-dir`, read again at each reload.
    pub dir: Option<std::path::PathBuf>,
    /// `--warm-period` / `warmPeriod`.
    pub period: Duration,
    /// `warmParallelPulls`: at most this many warm pulls at once.
    pub parallel_pulls: usize,
    /// `[warmFromHistory]`: images removed externally pulled back as warm entries.
    pub from_history: Option<FromHistory>,
}

/// The default warm cycle period.
pub const DEFAULT_WARM_PERIOD: Duration = Duration::from_secs(60);

impl Default for WarmConfig {
    fn default() -> WarmConfig {
        WarmConfig {
            dir: None,
            period: DEFAULT_WARM_PERIOD,
            parallel_pulls: 1,
            from_history: None,
        }
    }
}
