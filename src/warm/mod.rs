//! Warm sets: the images a node keeps present ahead of use. Owns the warm entries (from the
//! config file's `[[warm]]` tables, the `warmSetDir` files and the journal's history),
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
//! A set holds at most [`MAX_WARM_ENTRIES`] entries, from at most [`MAX_WARM_FILES`] files
//! (more is refused, naming the count), and no cost grows with entries times images: which
//! entry keeps an image, and which image an entry names, are lookups in a
//! [`MatchIndex`] (one parse per name).

mod files;
mod from_store;
mod history;
mod plan;

use std::time::Duration;

use serde::Serialize;

use crate::model::{ImageLike, UnixNanos};
use crate::reference::{MatchIndex, image_matches};

pub use files::{
    SizeSpec, WarmEntrySpec, WarmError, WarmFile, is_warm_file_name, parse_size, read_warm_dir,
    resolve_specs,
};
pub use from_store::{HistorySizes, history_warm_entries, restore_candidates_in};
pub use history::{
    DEFAULT_USED_WITHIN, FromHistory, RestoreCandidate, RestoreItem, RestoreOptions,
    RestoreOutcome, RestoreState, RestoreStep, history_entries, restore_candidates, restore_step,
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

/// The most entries a warm set holds (the config file's `[[warm]]` tables and the directory's
/// files together): past it the configuration is refused, naming the count (issue 41: a set of
/// 30,000 kept a worker busy and stalled the probes). Each entry is judged every warm cycle
/// and the GC asks it of every image it lists.
pub const MAX_WARM_ENTRIES: usize = 10_000;

/// The most warm set files `warmSetDir` holds (`*.yaml`, `*.yml`, `*.json`, not hidden):
/// past it the directory is refused, naming the count, before any file is read.
pub const MAX_WARM_FILES: usize = 100;

/// The warm entries in priority order (the config file's first, then the directory's files by
/// name, then history's), with an index of their names ([`MatchIndex`]) built once per set, so
/// which entry keeps an image is a lookup of the image's names, not a parse of every entry's.
#[derive(Clone, Debug, Default)]
pub struct WarmSet {
    entries: Vec<WarmEntry>,
    /// The entries' names and handlers, by position (built with the set; `stamped` changes no
    /// name).
    index: std::sync::Arc<MatchIndex>,
    /// `[warmFromHistory]`: the GC also keeps, until their last use plus `usedWithin`, the
    /// images the journal says were removed externally ([`history_entries`]), so an image
    /// the warm loop pulled back is not collected as an ordinary one.
    pub from_history: Option<FromHistory>,
}

/// Sets are equal when their entries and `[warmFromHistory]` are (the index follows from the
/// entries).
impl PartialEq for WarmSet {
    fn eq(&self, other: &WarmSet) -> bool {
        self.entries == other.entries && self.from_history == other.from_history
    }
}

impl Eq for WarmSet {}

impl WarmSet {
    /// A warm set of `entries`, in priority order.
    pub fn new(entries: Vec<WarmEntry>) -> WarmSet {
        let index = MatchIndex::of_names(
            entries
                .iter()
                .map(|e| (e.image.as_str(), e.runtime_handler.as_str())),
        );
        WarmSet {
            entries,
            index: std::sync::Arc::new(index),
            from_history: None,
        }
    }

    /// The entries, in priority order.
    pub fn entries(&self) -> &[WarmEntry] {
        &self.entries
    }

    /// The set with `[warmFromHistory]`'s window (see [`WarmSet::from_history`]).
    pub fn with_from_history(mut self, from_history: Option<FromHistory>) -> WarmSet {
        self.from_history = from_history;
        self
    }

    /// Whether the set has no entry.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The set with each `for` turned into an `until` from `now`, or from when `previous`
    /// (the set before a reload) first read the same entry, so a reload that keeps an entry
    /// does not extend it. One pass over each set (a map of `previous`'s stamps), not a search
    /// of `previous` per entry.
    pub fn stamped(mut self, now: UnixNanos, previous: &WarmSet) -> WarmSet {
        let mut before: std::collections::HashMap<(&str, &str, Duration), Option<UnixNanos>> =
            std::collections::HashMap::new();
        for p in &previous.entries {
            if let Some(lifetime) = p.lifetime {
                // The first such entry of `previous`, as a search from the front would find.
                before
                    .entry((p.image.as_str(), p.runtime_handler.as_str(), lifetime))
                    .or_insert(p.until);
            }
        }
        for entry in &mut self.entries {
            let Some(lifetime) = entry.lifetime else {
                continue;
            };
            let first_read = before
                .get(&(
                    entry.image.as_str(),
                    entry.runtime_handler.as_str(),
                    lifetime,
                ))
                .copied()
                .flatten();
            entry.until = match first_read {
                Some(until) => Some(until),
                None => Some(now.saturating_add(lifetime)),
            };
        }
        self
    }

    /// The entry that keeps `image` warm at `now`, if any: GC, prune and DeleteUnusedImages
    /// never remove it. The first active entry naming it, found through the index.
    pub fn keeps(&self, image: &impl ImageLike, now: UnixNanos) -> Option<&WarmEntry> {
        self.index
            .naming(image)
            .into_iter()
            .filter_map(|at| self.entries.get(at))
            .find(|e| e.active(now))
    }
}

/// The warm loop's settings (the set itself is the GC's, `GcConfig::warm`, as the GC keeps
/// what it names).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WarmConfig {
    /// `warmSetDir`, read again at each reload.
    pub dir: Option<std::path::PathBuf>,
    /// `warmPeriod`.
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ImageId, RuntimeImage};

    fn entry(image: &str, until: Option<i64>, lifetime: Option<u64>) -> WarmEntry {
        WarmEntry {
            image: image.into(),
            runtime_handler: String::new(),
            until: until.map(UnixNanos),
            lifetime: lifetime.map(Duration::from_secs),
            size_hint: None,
            origin: format!("test {image}"),
        }
    }

    /// Issue 41: which entry keeps an image is a lookup of the image's names, not a parse of
    /// every entry (the GC asks it of every image it lists and of every victim): a set of
    /// 5,000 entries answers with a handful of parses, and answers what a search from the
    /// front answers (the first active entry naming it; an expired one before it is skipped,
    /// a short name matches).
    #[test]
    fn which_entry_keeps_an_image_is_a_lookup_not_a_parse_per_entry() {
        let mut entries: Vec<WarmEntry> = (0..5000)
            .map(|i| entry(&format!("registry.example/warm-{i}:1"), None, None))
            .collect();
        entries.insert(10, entry("registry.example/warm-4000:1", Some(5), None));
        entries.push(entry("busybox", None, None));
        let set = WarmSet::new(entries);
        let image = |tag: &str| RuntimeImage {
            id: ImageId::new("sha256:1"),
            repo_tags: vec![tag.into()],
            ..RuntimeImage::default()
        };
        crate::reference::PARSES.with(|n| n.set(0));
        let now = UnixNanos(10);
        let kept = set.keeps(&image("registry.example/warm-4000:1"), now);
        assert_eq!(
            kept.map(|e| (e.origin.as_str(), e.until)),
            Some(("test registry.example/warm-4000:1", None)),
            "the active entry, not the expired one before it"
        );
        assert_eq!(
            set.keeps(&image("docker.io/library/busybox:latest"), now)
                .map(|e| e.image.as_str()),
            Some("busybox")
        );
        assert!(set.keeps(&image("registry.example/other:1"), now).is_none());
        let parses = crate::reference::PARSES.with(std::cell::Cell::get);
        assert!(parses <= 6, "{parses} parses for three lookups");
        // Before its `until`, the first entry is the one that keeps it.
        let early = set.keeps(&image("registry.example/warm-4000:1"), UnixNanos(1));
        assert_eq!(early.map(|e| e.until), Some(Some(UnixNanos(5))));
    }

    /// Without a warm set, asking whether it keeps an image parses nothing: the GC asks it of
    /// every victim, and the first parse builds the reference parser (about 16 MiB of
    /// compiled regex, which `agent_peak_rss_10k_mib` measured as 34 MiB against 16 when it
    /// did).
    #[test]
    fn an_empty_warm_set_keeps_nothing_without_a_parse() {
        let set = WarmSet::new(Vec::new());
        let image = RuntimeImage {
            id: ImageId::new("sha256:1"),
            repo_tags: vec!["registry.example/a:1".into()],
            repo_digests: vec!["registry.example/a@sha256:abc".into()],
            ..RuntimeImage::default()
        };
        crate::reference::PARSES.with(|n| n.set(0));
        assert!(set.keeps(&image, UnixNanos(10)).is_none());
        let parses = crate::reference::PARSES.with(std::cell::Cell::get);
        assert_eq!(parses, 0, "an empty set parsed the image's names");
    }

    /// A reload keeps each `for` entry's first end, found in one pass over the previous set:
    /// the same end a search from the front of it finds, for any number of entries.
    #[test]
    fn stamping_keeps_the_first_reads_end() {
        let first = WarmSet::new(vec![
            entry("a:1", None, Some(60)),
            entry("b:1", None, Some(60)),
            entry("a:1", None, Some(60)),
        ])
        .stamped(UnixNanos(1_000_000_000), &WarmSet::default());
        let ends: Vec<Option<UnixNanos>> = first.entries().iter().map(|e| e.until).collect();
        assert_eq!(ends, [Some(UnixNanos(61_000_000_000)); 3]);
        let again = WarmSet::new(vec![
            entry("b:1", None, Some(60)),
            entry("c:1", None, Some(60)),
            entry("a:1", None, Some(120)),
        ])
        .stamped(UnixNanos(30_000_000_000), &first);
        let ends: Vec<Option<UnixNanos>> = again.entries().iter().map(|e| e.until).collect();
        assert_eq!(
            ends,
            [
                Some(UnixNanos(61_000_000_000)),
                Some(UnixNanos(90_000_000_000)),
                Some(UnixNanos(150_000_000_000)),
            ],
            "b keeps its end; c and a (another lifetime) are new"
        );
    }
}
