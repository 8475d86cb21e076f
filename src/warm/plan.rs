//! One warm cycle's plan: which entries are present, which to pull now, which wait, and which
//! do not fit under the GC's low threshold. Pure: the caller gives `now`, the runtime's
//! images, the image filesystem and the sizes the node's history knows.
//!
//! The size rule (the registry's manifest sizes are not available through CRI): an entry's
//! size is the size of a record or journal entry of an image with its name on this node, else
//! its `size` hint. A known size is pulled only if the bytes used plus it, plus the sizes of
//! the earlier entries planned in this cycle, stay at or under `capacity × low / 100` and,
//! with a byte budget set, the images' total plus them stays at or under the budget's low
//! line; else the entry does not fit. With inode thresholds set, nothing fits while inode use
//! is at or above the low inode threshold (CRI does not say how many inodes an image takes). An unknown size is pulled only while the bytes used are below that
//! limit and no other pull is planned in the cycle, then no further warm pull is planned until
//! the next cycle sees what it took. The GC keeps every warm image, so a pull is never undone
//! by the GC.

use serde::Serialize;

use crate::model::{RuntimeImage, UnixNanos};
use crate::reference::MatchIndex;

use super::WarmEntry;

/// Where one warm entry stands after a plan (and, for `Pulling`, after the cycle's pulls:
/// `Failed` when the pull failed).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum WarmState {
    /// The runtime has it.
    Present,
    /// Pulled in this cycle.
    Pulling,
    /// Missing, and waits for a later cycle (the cycle's pulls are taken, or a pull of an
    /// unknown size is planned).
    Queued,
    /// Missing, and pulling it would take the image filesystem above the GC's low threshold.
    DoesNotFit,
    /// The pull failed (backoff applies to the next try).
    Failed,
    /// Its `until` has passed: no longer warm.
    Expired,
}

impl WarmState {
    /// Every state, in declaration order.
    pub const ALL: [WarmState; 6] = [
        WarmState::Present,
        WarmState::Pulling,
        WarmState::Queued,
        WarmState::DoesNotFit,
        WarmState::Failed,
        WarmState::Expired,
    ];

    /// The `state` label of `imagekeeper_warm_images`.
    pub fn as_str(self) -> &'static str {
        match self {
            WarmState::Present => "present",
            WarmState::Pulling => "pulling",
            WarmState::Queued => "queued",
            WarmState::DoesNotFit => "does_not_fit",
            WarmState::Failed => "failed",
            WarmState::Expired => "expired",
        }
    }
}

/// One entry's state, with the size the plan used and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct WarmStatus {
    /// The entry.
    pub entry: WarmEntry,
    /// Where it stands.
    pub state: WarmState,
    /// The size the plan judged with (`None`: unknown).
    pub size: Option<u64>,
    /// Why, in words (empty for `Present`).
    pub detail: String,
}

/// A warm cycle's plan: every entry, in priority order.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct WarmPlan {
    /// Each entry's status, in priority order.
    pub statuses: Vec<WarmStatus>,
}

impl WarmPlan {
    /// The entries to pull now, in priority order.
    pub fn pulls(&self) -> impl Iterator<Item = &WarmStatus> {
        self.statuses
            .iter()
            .filter(|s| s.state == WarmState::Pulling)
    }

    /// How many entries are in each state.
    pub fn count(&self, state: WarmState) -> usize {
        self.statuses.iter().filter(|s| s.state == state).count()
    }
}

/// What a plan reads.
pub struct PlanInput<'a> {
    /// The warm set's entries.
    pub entries: &'a [WarmEntry],
    /// The plan's time.
    pub now: UnixNanos,
    /// The runtime's images, listed now.
    pub images: &'a [RuntimeImage],
    /// The image filesystem's (capacity, available) bytes; `None` when the runtime could not
    /// say: then nothing is pulled (a warm pull is disk-aware or not made).
    pub fs: Option<(u64, u64)>,
    /// The GC's low threshold percent.
    pub low_threshold_percent: i64,
    /// The byte budget's low line (`imageGCLowBytes`), when a budget is set: the listed
    /// images' total plus the planned pulls stays at or under it, or the budget's walk would
    /// take back what the warm cycle pulls.
    pub bytes_low: Option<u64>,
    /// Inode use is at or above the low inode threshold (inode thresholds set): no warm pull,
    /// or the inode pass would take back what it pulls.
    pub inodes_at_or_above_low: bool,
    /// At most this many pulls per cycle (`warmParallelPulls`).
    pub max_pulls: usize,
    /// The size the node's history knows for an entry's image (a record or journal entry).
    pub known_size: &'a dyn Fn(&WarmEntry) -> Option<u64>,
}

/// Whether inode thresholds are set (`inode_low_percent`, the GC policy's low inode threshold
/// percent, `None` when they are off) and the image filesystem's inode use (statvfs, as the
/// GC's inode rule reads it) is at or above the low one: then a warm pull or a restore would
/// only feed the inode pass.
pub fn inodes_at_or_above_low(
    inode_low_percent: Option<i64>,
    fs: &crate::model::ImageFsStats,
) -> bool {
    let Some(low) = inode_low_percent else {
        return false;
    };
    if fs.inodes == 0 {
        return false;
    }
    let used = u128::from(fs.inodes.saturating_sub(fs.inodes_free));
    let percent = used * 100 / u128::from(fs.inodes);
    i128::try_from(percent).unwrap_or(i128::MAX) >= i128::from(low)
}

/// Plans one warm cycle (see the module's doc for the rule).
pub fn plan(input: &PlanInput<'_>) -> WarmPlan {
    let limit = input.fs.map(|(capacity, available)| {
        let percent = u128::try_from(input.low_threshold_percent.clamp(0, 100)).unwrap_or(0);
        let limit = u128::from(capacity) * percent / 100;
        let used = u128::from(capacity.saturating_sub(available));
        (limit, used)
    });
    let images_total: u128 = input.images.iter().map(|i| u128::from(i.size)).sum();
    // Which listed image an entry names: one lookup of the entry's name, not a parse of every
    // image's names per entry.
    let listed = MatchIndex::of_images(input.images);
    let mut planned: u128 = 0;
    let mut pulls = 0usize;
    let mut unknown_planned = false;
    let mut statuses = Vec::with_capacity(input.entries.len());
    // One entry per (image, handler): a later duplicate adds nothing.
    let mut seen = std::collections::BTreeSet::new();
    for entry in input.entries {
        if !seen.insert((&entry.image, &entry.runtime_handler)) {
            continue;
        }
        let status = |state, size, detail: String| WarmStatus {
            entry: entry.clone(),
            state,
            size,
            detail,
        };
        if !entry.active(input.now) {
            statuses.push(status(WarmState::Expired, None, "its time is up".into()));
            continue;
        }
        let present = listed
            .named_by(&entry.image, &entry.runtime_handler)
            .first()
            .and_then(|&at| input.images.get(at));
        if let Some(image) = present {
            statuses.push(status(WarmState::Present, Some(image.size), String::new()));
            continue;
        }
        let size = (input.known_size)(entry).or(entry.size_hint);
        let Some((limit, used)) = limit else {
            statuses.push(status(
                WarmState::Queued,
                size,
                "the image filesystem's usage is unknown".into(),
            ));
            continue;
        };
        let after = used.saturating_add(planned);
        let fits = match size {
            Some(size) => after.saturating_add(u128::from(size)) <= limit,
            None => after < limit,
        };
        let budget_after = images_total.saturating_add(planned);
        let fits_budget = input.bytes_low.is_none_or(|low| match size {
            Some(size) => budget_after.saturating_add(u128::from(size)) <= u128::from(low),
            None => budget_after < u128::from(low),
        });
        if input.inodes_at_or_above_low {
            statuses.push(status(
                WarmState::DoesNotFit,
                size,
                "the image filesystem's inode use is at or above the low inode threshold".into(),
            ));
            continue;
        }
        if fits && !fits_budget {
            let low = input.bytes_low.unwrap_or(0);
            let detail = match size {
                Some(size) => format!(
                    "needs {} and {} is left below the byte budget's low line ({})",
                    crate::format::format_size(size),
                    crate::format::format_size(
                        u64::try_from(u128::from(low).saturating_sub(budget_after))
                            .unwrap_or(u64::MAX)
                    ),
                    crate::format::format_size(low)
                ),
                None => format!(
                    "its size is unknown and the images' total is at or above the byte budget's \
                     low line ({})",
                    crate::format::format_size(low)
                ),
            };
            statuses.push(status(WarmState::DoesNotFit, size, detail));
            continue;
        }
        if !fits {
            let detail = match size {
                Some(size) => format!(
                    "needs {} and {} is free below the low threshold",
                    crate::format::format_size(size),
                    crate::format::format_size(
                        u64::try_from(limit.saturating_sub(after)).unwrap_or(u64::MAX)
                    )
                ),
                None => "its size is unknown and the image filesystem is at or above the low \
                         threshold"
                    .into(),
            };
            statuses.push(status(WarmState::DoesNotFit, size, detail));
            continue;
        }
        if pulls >= input.max_pulls || unknown_planned || (size.is_none() && pulls > 0) {
            statuses.push(status(
                WarmState::Queued,
                size,
                "waits for the pulls of this cycle".into(),
            ));
            continue;
        }
        pulls += 1;
        match size {
            Some(size) => planned = planned.saturating_add(u128::from(size)),
            None => unknown_planned = true,
        }
        statuses.push(status(WarmState::Pulling, size, String::new()));
    }
    WarmPlan { statuses }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ImageId;

    fn entry(image: &str, size_hint: Option<u64>) -> WarmEntry {
        WarmEntry {
            image: image.into(),
            runtime_handler: String::new(),
            until: None,
            lifetime: None,
            size_hint,
            origin: "test".into(),
        }
    }

    fn present(tag: &str, size: u64) -> RuntimeImage {
        RuntimeImage {
            id: ImageId::new(format!("sha256:{:064x}", tag.len())),
            repo_tags: vec![format!("docker.io/library/{tag}")],
            size,
            ..RuntimeImage::default()
        }
    }

    fn states(plan: &WarmPlan) -> Vec<(&str, WarmState)> {
        plan.statuses
            .iter()
            .map(|s| (s.entry.image.as_str(), s.state))
            .collect()
    }

    const GB: u64 = 1_000_000_000;

    /// The low inode threshold bounds warm pulls only when set, on a filesystem that counts
    /// inodes, from the used percent (rounded down) reaching it: (low, inodes, free, want).
    #[test]
    fn inode_use_is_at_or_above_low_only_with_thresholds_set_and_inodes_counted() {
        let cases: [(Option<i64>, u64, u64, bool); 7] = [
            (None, 100, 0, false),
            (Some(80), 0, 0, false),
            (Some(80), 100, 21, false),
            (Some(80), 100, 20, true),
            (Some(80), 1000, 201, false),
            (Some(0), 100, 100, true),
            (Some(80), 100, 150, false),
        ];
        for (low, inodes, inodes_free, want) in cases {
            let fs = crate::model::ImageFsStats::new("/images", 0, 100 * GB, 50 * GB)
                .with_inodes(inodes, inodes_free);
            assert_eq!(
                inodes_at_or_above_low(low, &fs),
                want,
                "low {low:?}, {inodes} inodes, {inodes_free} free"
            );
        }
    }

    /// 100 GB disk, 60 GB used, low threshold 80: 20 GB of headroom. Earlier entries first:
    /// a (15 GB) fits, b (10 GB) no longer does, c (5 GB) still fits; d is present.
    #[test]
    fn earlier_entries_take_the_headroom_and_the_rest_do_not_fit() {
        let entries = vec![
            entry("a:1", Some(15 * GB)),
            entry("b:1", Some(10 * GB)),
            entry("c:1", Some(5 * GB)),
            entry("d:1", None),
        ];
        let images = vec![present("d:1", GB)];
        let got = plan(&PlanInput {
            entries: &entries,
            now: UnixNanos(1),
            images: &images,
            fs: Some((100 * GB, 40 * GB)),
            low_threshold_percent: 80,
            bytes_low: None,
            inodes_at_or_above_low: false,
            max_pulls: 5,
            known_size: &|_| None,
        });
        assert_eq!(
            states(&got),
            [
                ("a:1", WarmState::Pulling),
                ("b:1", WarmState::DoesNotFit),
                ("c:1", WarmState::Pulling),
                ("d:1", WarmState::Present),
            ]
        );
        assert!(
            got.statuses[1].detail.contains("needs 9.3 GiB"),
            "{}",
            got.statuses[1].detail
        );
    }

    /// A byte budget's low line bounds warm pulls as the low threshold does (else its walk
    /// would take back the workload's images each cycle); inode use at or above the low inode
    /// threshold stops every warm pull. 1 TB disk at 10 %: the percentage rule alone would
    /// pull everything.
    #[test]
    fn the_byte_budget_and_the_inode_threshold_bound_warm_pulls_too() {
        let entries = vec![
            entry("a:1", Some(30 * GB)),
            entry("b:1", Some(30 * GB)),
            entry("c:1", None),
        ];
        let images = vec![present("d:1", 40 * GB)];
        let input = |bytes_low, inodes_at_or_above_low| PlanInput {
            entries: &entries,
            now: UnixNanos(1),
            images: &images,
            fs: Some((1000 * GB, 900 * GB)),
            low_threshold_percent: 80,
            bytes_low,
            inodes_at_or_above_low,
            max_pulls: 5,
            known_size: &|_| None,
        };
        let free = plan(&input(None, false));
        assert_eq!(free.count(WarmState::Pulling), 2, "{:?}", states(&free));
        // Budget low 80 GB, 40 GB listed: a (30) fits, b would take the total to 100.
        let budget = plan(&input(Some(80 * GB), false));
        assert_eq!(
            states(&budget)[..2],
            [("a:1", WarmState::Pulling), ("b:1", WarmState::DoesNotFit)]
        );
        assert!(
            budget.statuses[1].detail.contains("byte budget"),
            "{}",
            budget.statuses[1].detail
        );
        // The unknown size waits for a later cycle (a pull is planned) while under the line.
        assert_eq!(budget.statuses[2].state, WarmState::Queued);
        let inodes = plan(&input(None, true));
        assert_eq!(
            inodes.count(WarmState::DoesNotFit),
            3,
            "{:?}",
            states(&inodes)
        );
        assert!(inodes.statuses[0].detail.contains("inode"));
    }

    /// Issue 41: a plan's cost grows with entries plus images, not their product: each name
    /// is parsed a bounded number of times (a parse per entry x image pair let 30,000 entries
    /// hold a worker for seconds). The plan itself is the same: present, pulled, queued.
    #[test]
    fn a_plan_parses_each_name_a_bounded_number_of_times() {
        let images: Vec<RuntimeImage> = (0..50)
            .map(|i| RuntimeImage {
                id: ImageId::new(format!("sha256:{i:064x}")),
                repo_tags: vec![format!("registry.example/present-{i}:1")],
                size: GB,
                ..RuntimeImage::default()
            })
            .collect();
        let mut entries: Vec<WarmEntry> = (0..2000)
            .map(|i| entry(&format!("registry.example/warm-{i}:1"), Some(GB)))
            .collect();
        entries.insert(0, entry("registry.example/present-7:1", None));
        crate::reference::PARSES.with(|n| n.set(0));
        let got = plan(&PlanInput {
            entries: &entries,
            now: UnixNanos(1),
            images: &images,
            fs: Some((100_000 * GB, 90_000 * GB)),
            low_threshold_percent: 80,
            bytes_low: None,
            inodes_at_or_above_low: false,
            max_pulls: 5,
            known_size: &|_| None,
        });
        let parses = crate::reference::PARSES.with(std::cell::Cell::get);
        assert_eq!(got.statuses.len(), entries.len());
        assert_eq!(got.statuses[0].state, WarmState::Present);
        assert_eq!(got.count(WarmState::Pulling), 5);
        assert_eq!(got.count(WarmState::Queued), entries.len() - 6);
        assert!(
            parses <= 2 * (entries.len() + images.len()),
            "{parses} parses for {} entries and {} images",
            entries.len(),
            images.len()
        );
    }

    /// The history's size wins over the hint; an unknown size pulls alone, and only below the
    /// low threshold; `max_pulls` queues the rest; an expired entry is neither kept nor pulled.
    #[test]
    fn known_sizes_unknown_sizes_parallelism_and_expiry() {
        let mut expired = entry("old:1", None);
        expired.until = Some(UnixNanos(5));
        let entries = vec![
            expired,
            entry("hist:1", Some(GB)),
            entry("unknown:1", None),
            entry("small:1", Some(1)),
        ];
        let known = |e: &WarmEntry| (e.image == "hist:1").then_some(30 * GB);
        let input = |fs, max_pulls| PlanInput {
            entries: &entries,
            now: UnixNanos(5),
            images: &[],
            fs,
            low_threshold_percent: 80,
            bytes_low: None,
            inodes_at_or_above_low: false,
            max_pulls,
            known_size: &known,
        };
        // 20 GB of headroom: hist's 30 GB (its journal size, not the 1 GB hint) does not fit;
        // the unknown one pulls alone, the small one waits for it.
        let got = plan(&input(Some((100 * GB, 40 * GB)), 5));
        assert_eq!(
            states(&got),
            [
                ("old:1", WarmState::Expired),
                ("hist:1", WarmState::DoesNotFit),
                ("unknown:1", WarmState::Pulling),
                ("small:1", WarmState::Queued),
            ]
        );
        // At the threshold: nothing of unknown size starts; 1 byte does not fit either.
        let got = plan(&input(Some((100 * GB, 20 * GB)), 5));
        assert_eq!(got.count(WarmState::DoesNotFit), 3);
        // Unknown usage: nothing pulls.
        let got = plan(&input(None, 5));
        assert_eq!(got.count(WarmState::Pulling), 0);
        assert_eq!(got.count(WarmState::Queued), 3);
        // Room for everything, one pull per cycle.
        let got = plan(&input(Some((1000 * GB, 900 * GB)), 1));
        assert_eq!(
            states(&got)[1..],
            [
                ("hist:1", WarmState::Pulling),
                ("unknown:1", WarmState::Queued),
                ("small:1", WarmState::Queued),
            ]
        );
    }
}
