//! The order the space walk removes images in: the kubelet's (least recently used first, the
//! store's eviction index read lazily; the default, `kubelet-order`), imagekeeper's opt-in
//! `adaptive` order, or the opt-in `predictive` one (`gc/predictive.rs`, which falls back to
//! `adaptive`'s classes on ties).
//!
//! `adaptive` is a segmented order in the spirit of 2Q (Johnson and Shasha, 1994) and of the
//! idea LRU-K and ARC share (one use is weak evidence of the next), built from what imagekeeper
//! keeps and the kubelet does not: records that survive restarts, the image names, and the
//! eviction journal. Three classes, removed in this order, each least recently used first,
//! then first detected, then by key (the kubelet's order within a class):
//! 1. *superseded*: a newer image of the same repository (another tag, first detected later)
//!    is listed: a rollout replaced it;
//! 2. *one-off*: it never came back after a removal (no journal entry of its id marked
//!    re-pulled) and its recorded uses span less than [`REUSE_SPAN`] from its arrival (first
//!    detected) to its last use: one job's image, a scan's target;
//! 3. *reused*: used again well after it arrived, or removed once and pulled back, which the
//!    journal records (the journal plays ARC's ghost list: a re-pull says the removal was a
//!    mistake).
//!
//! A scan of one-off images therefore no longer flushes the images the node keeps using,
//! which pure recency does. Measured alternatives (`scripts/quality`, the book's design
//! chapter): ordering reused images by their number of returns first cost more on the AI and
//! web families than recency within the class.
//!
//! Invariants: the order only changes which eligible image is removed first. Every rule that
//! keeps an image is applied unchanged by the walk (`evict::space_verdict`) and by the last
//! look before each removal (in use, pulling, pinned, pin, warm, kubelet intents and pulled
//! records, MinAge, used since the GC started); MaxAge and DeleteUnusedImages read the index as
//! before. The candidates are the images the cycle's detect listed (only listed images are
//! ever removed), which detect already holds in memory and sorts once by key: ranking them
//! costs one record lookup each, the returns by id (kept in memory between walks by the store's
//! history mirror: no read of the journal) and one sort of the listed images, per space walk,
//! not per record in the store.

use std::collections::BTreeMap;
use std::time::Duration;

use foldhash::{HashMap, HashMapExt};
use serde::{Deserialize, Serialize};

use crate::model::{ImageId, JournalEntry, RecordKey, UnixNanos};
use crate::store::{JournalKey, KeyParts, StoredRecord};

/// `imageGCPolicy`: the order the space walk removes images in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum GcOrder {
    /// The kubelet's: least recently used first, then first detected, read from the index.
    #[default]
    KubeletOrder,
    /// imagekeeper's adaptive order (see the module's documentation).
    Adaptive,
    /// imagekeeper's predictive order: the furthest estimated next use first, from each
    /// image's own history (`gc/predictive.rs`).
    Predictive,
}

impl GcOrder {
    /// The order's name as text.
    pub fn as_str(self) -> &'static str {
        match self {
            GcOrder::KubeletOrder => "kubelet-order",
            GcOrder::Adaptive => "adaptive",
            GcOrder::Predictive => "predictive",
        }
    }
}

/// An image whose recorded uses span less than this from its arrival, and that never came
/// back after a removal, is one-off.
pub const REUSE_SPAN: Duration = Duration::from_secs(3600);

/// Where the adaptive order puts one image, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct AdaptiveRank {
    /// Never came back and used only within an hour (`REUSE_SPAN`) of its arrival.
    pub one_off: bool,
    /// How many of its removals the journal shows followed by a re-pull.
    pub returns: u32,
    /// From its first detection to its last use (zero when never used).
    pub use_span: Duration,
    /// A newer image of the same repository (another tag, first detected later) is present:
    /// a rollout replaced it.
    pub superseded: Option<String>,
}

impl AdaptiveRank {
    /// Why the image ranks where it does, for `explain`.
    pub fn describe(&self) -> String {
        let span = crate::format::go_duration(Duration::from_secs(self.use_span.as_secs()));
        if let Some(newer) = &self.superseded {
            format!(
                "adaptive: superseded by {newer:?} (a newer tag of its repository), removed first"
            )
        } else if self.one_off {
            format!(
                "adaptive: one-off (uses span {span} from its arrival, under {}; never came back), removed before reused images",
                crate::format::go_duration(REUSE_SPAN)
            )
        } else if self.returns > 0 {
            format!(
                "adaptive: reused (came back {} time{} after a removal), after one-off images",
                self.returns,
                if self.returns == 1 { "" } else { "s" }
            )
        } else {
            format!("adaptive: reused (uses span {span} from its arrival), after one-off images")
        }
    }

    /// The sort key: superseded first, then one-off, then reused (returns do not order the
    /// reused); the kubelet's order within.
    pub(crate) fn class(&self) -> u8 {
        class_of(self.superseded.is_some(), self.one_off)
    }
}

/// The class's sort key (see [`AdaptiveRank::class`]) of an image superseded or not, one-off
/// or not.
pub(crate) fn class_of(superseded: bool, one_off: bool) -> u8 {
    if superseded {
        0
    } else if one_off {
        1
    } else {
        2
    }
}

/// How many times each image id came back after a removal, from the journal.
pub fn returns(journal: &[(JournalKey, JournalEntry)]) -> BTreeMap<ImageId, u32> {
    let mut out: BTreeMap<ImageId, u32> = BTreeMap::new();
    for (key, entry) in journal {
        if entry.repulled_at.is_some() {
            *out.entry(key.key.image_id.clone()).or_default() += 1;
        }
    }
    out
}

/// The repository of a repo tag (`reg/app:1` → `reg/app`; a name without a tag is its own
/// repository).
fn repository(tag: &str) -> &str {
    // The last ':', by a short scan from the end (a tag is a name's last few bytes; this is
    // `rsplit_once(':')` without a call to `memrchr`).
    let bytes = tag.as_bytes();
    match bytes.iter().rposition(|&b| b == b':') {
        Some(at) if !bytes[at + 1..].contains(&b'/') => tag.get(..at).unwrap_or(tag),
        _ => tag,
    }
}

/// The listed images' repo tags by position, flat (image `i`'s are [`ListedTags::of`]`(i)`),
/// borrowed from the runtime's list or from a map: no key is cloned or looked up per image.
#[derive(Clone, Debug, Default)]
pub struct ListedTags<'a> {
    names: Vec<&'a str>,
    /// Where each image's tags end in `names`.
    ends: Vec<usize>,
}

impl<'a> ListedTags<'a> {
    /// Empty, with room for `images` images.
    pub fn with_capacity(images: usize) -> ListedTags<'a> {
        ListedTags {
            names: Vec::with_capacity(images),
            ends: Vec::with_capacity(images),
        }
    }

    /// Tags laid out flat (`names`), each image's ending at its entry of `ends` (ascending,
    /// none past `names.len()`).
    pub(crate) fn from_ends(names: Vec<&'a str>, ends: Vec<usize>) -> ListedTags<'a> {
        debug_assert!(ends.windows(2).all(|w| w[0] <= w[1]));
        debug_assert!(ends.last().is_none_or(|&end| end <= names.len()));
        ListedTags { names, ends }
    }

    /// The next image's tags.
    pub fn push(&mut self, tags: impl IntoIterator<Item = &'a str>) {
        self.names.extend(tags);
        self.ends.push(self.names.len());
    }

    /// The tags of the image at `position` (none past the last pushed).
    pub fn of(&self, position: usize) -> &[&'a str] {
        let start = match position.checked_sub(1) {
            None => 0,
            Some(before) => self.ends.get(before).copied().unwrap_or(self.names.len()),
        };
        let end = self.ends.get(position).copied().unwrap_or(start);
        self.names.get(start..end).unwrap_or_default()
    }

    /// The tags `map` holds for each of `records`, by position.
    pub fn from_map(
        records: &[StoredRecord],
        map: &'a BTreeMap<RecordKey, Vec<String>>,
    ) -> ListedTags<'a> {
        let mut tags = ListedTags::with_capacity(records.len());
        for r in records {
            tags.push(map.get(&r.key).into_iter().flatten().map(String::as_str));
        }
        tags
    }
}

/// For each position of `records`, the tag of the newer image of the same repository that
/// supersedes it, if one does: `tags` are the images' repo tags by position (as the runtime
/// lists them, or as the store last saw them), `records` their first detection. The hash map
/// only looks repositories up; the result follows `records`' order, whatever the hashing.
pub fn superseded_by<'t>(records: &[StoredRecord], tags: &ListedTags<'t>) -> Vec<Option<&'t str>> {
    let keys: Vec<KeyParts<'_>> = records.iter().map(|r| key_parts(&r.key)).collect();
    superseded_among(&keys, |i| records[i].record.first_detected, tags)
}

/// A record key as the bytes of its parts (whose order is the key's).
pub(crate) fn key_parts(key: &RecordKey) -> KeyParts<'_> {
    (
        key.image_id.as_str().as_bytes(),
        key.runtime_handler.as_bytes(),
    )
}

/// [`superseded_by`] of the images whose keys are `keys` (by position), `first_detected(i)`
/// the first detection of the image at position `i`.
pub(crate) fn superseded_among<'t>(
    keys: &[KeyParts<'_>],
    first_detected: impl Fn(usize) -> UnixNanos,
    tags: &ListedTags<'t>,
) -> Vec<Option<&'t str>> {
    // The newest image of each repository: (first detected, position, tag), found by the
    // repository's slot (each tag's repository hashed once: the slots are kept, in the order
    // the tags are visited, for the second pass).
    let mut slot_of: HashMap<&str, u32> = HashMap::with_capacity(keys.len());
    let mut newest: Vec<(UnixNanos, usize, &str)> = Vec::with_capacity(keys.len());
    let mut slots: Vec<u32> = Vec::with_capacity(keys.len());
    for (i, key) in keys.iter().enumerate() {
        let first = first_detected(i);
        for &tag in tags.of(i) {
            let next = u32::try_from(newest.len()).expect("fewer than 4G repositories");
            let slot = *slot_of.entry(repository(tag)).or_insert(next);
            slots.push(slot);
            if slot == next {
                newest.push((first, i, tag));
                continue;
            }
            let entry = &mut newest[slot as usize];
            // (An image is never newer than itself: its key is not compared with itself.)
            if entry.1 != i && (first, key) > (entry.0, &keys[entry.1]) {
                *entry = (first, i, tag);
            }
        }
    }
    drop(slot_of);
    let mut visited = 0;
    keys.iter()
        .enumerate()
        .map(|(i, key)| {
            let first_detected = first_detected(i);
            // This image's tags' slots, in the order the first pass visited them.
            let count = tags.of(i).len();
            let mine = slots.get(visited..visited + count).unwrap_or_default();
            visited += count;
            // Superseded when every repository it is tagged in has a newer image; named by
            // the first.
            let mut first = None;
            for &slot in mine {
                let newer = newest
                    .get(slot as usize)
                    .filter(|(at, at_position, _)| {
                        *at > first_detected && *at_position != i && keys[*at_position] != *key
                    })
                    .map(|(_, _, newer)| *newer);
                match newer {
                    None => return None,
                    Some(newer) => {
                        first.get_or_insert(newer);
                    }
                }
            }
            first
        })
        .collect()
}

/// How many times each image id came back after a removal, keyed by the id's text for
/// lookups by position (as [`returns`]).
pub(crate) fn returns_by_id(journal: &[(JournalKey, JournalEntry)]) -> HashMap<&[u8], u32> {
    let mut out: HashMap<&[u8], u32> = HashMap::new();
    for (key, entry) in journal {
        if entry.repulled_at.is_some() {
            *out.entry(key.key.image_id.as_str().as_bytes()).or_default() += 1;
        }
    }
    out
}

/// Whether an image with this record and this many returns is one-off: it never came back
/// and its uses span less than [`REUSE_SPAN`] from its arrival.
pub(crate) fn is_one_off(record: &crate::model::ImageRecord, returns: u32) -> bool {
    returns == 0 && use_span(record) < REUSE_SPAN
}

/// From an image's first detection to its last use (zero when never used).
fn use_span(record: &crate::model::ImageRecord) -> Duration {
    if record.last_used == UnixNanos::NEVER {
        Duration::ZERO
    } else {
        record.last_used.since(record.first_detected)
    }
}

/// One image's adaptive rank, from its record, its returns and what supersedes it.
pub(crate) fn rank_one(
    record: &crate::model::ImageRecord,
    returns: u32,
    superseded: Option<&str>,
) -> AdaptiveRank {
    AdaptiveRank {
        one_off: is_one_off(record, returns),
        returns,
        use_span: use_span(record),
        superseded: superseded.map(str::to_owned),
    }
}

/// `records` in the adaptive order, each with its rank.
pub fn rank(
    records: Vec<StoredRecord>,
    returns: &BTreeMap<ImageId, u32>,
    tags: &BTreeMap<RecordKey, Vec<String>>,
) -> Vec<(StoredRecord, AdaptiveRank)> {
    let listed = ListedTags::from_map(&records, tags);
    rank_listed(records, returns, &listed)
}

/// `records` in the adaptive order, each with its rank, their repo tags by position.
pub fn rank_listed(
    records: Vec<StoredRecord>,
    returns: &BTreeMap<ImageId, u32>,
    tags: &ListedTags<'_>,
) -> Vec<(StoredRecord, AdaptiveRank)> {
    let superseded = superseded_by(&records, tags);
    let ranks: Vec<AdaptiveRank> = records
        .iter()
        .zip(superseded)
        .map(|(r, newer)| {
            let returns = returns.get(&r.key.image_id).copied().unwrap_or(0);
            rank_one(&r.record, returns, newer)
        })
        .collect();
    let mut ranked: Vec<(StoredRecord, AdaptiveRank)> = records.into_iter().zip(ranks).collect();
    ranked.sort_by(|(a, ra), (b, rb)| {
        ra.class()
            .cmp(&rb.class())
            .then(a.record.last_used.cmp(&b.record.last_used))
            .then(a.record.first_detected.cmp(&b.record.first_detected))
            .then(a.key.cmp(&b.key))
    });
    ranked
}

/// `records` in the adaptive order, each with its rank, the returns read from `journal`
/// (`gc --dry-run` and `inspect explain`).
pub fn rank_adaptive(
    records: Vec<StoredRecord>,
    journal: &[(JournalKey, JournalEntry)],
    tags: &BTreeMap<RecordKey, Vec<String>>,
) -> Vec<(StoredRecord, AdaptiveRank)> {
    rank(records, &returns(journal), tags)
}

/// Tests of the orders: the ranked images' ids without `sha256:`, in order.
#[cfg(test)]
pub(crate) fn short_ids<R>(ranked: &[(StoredRecord, R)]) -> Vec<String> {
    ranked
        .iter()
        .map(|(r, _)| {
            r.key
                .image_id
                .as_str()
                .trim_start_matches("sha256:")
                .to_owned()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ImageRecord;

    fn rec(id: &str, first: i64, last: i64) -> StoredRecord {
        StoredRecord {
            key: RecordKey {
                image_id: ImageId::new(format!("sha256:{id}")),
                runtime_handler: String::new(),
            },
            record: ImageRecord {
                first_detected: UnixNanos::from_secs(first),
                last_used: if last == 0 {
                    UnixNanos::NEVER
                } else {
                    UnixNanos::from_secs(last)
                },
                size: 10,
                pinned: false,
            },
        }
    }

    fn order(ranked: &[(StoredRecord, AdaptiveRank)]) -> Vec<String> {
        short_ids(ranked)
    }

    /// A repository is the tag's text before its last ':' unless a '/' follows it (a port),
    /// as `rsplit_once` splits it.
    #[test]
    fn a_repository_is_the_name_before_the_tag() {
        let reference = |tag: &str| -> String {
            match tag.rsplit_once(':') {
                Some((repo, t)) if !t.contains('/') => repo.to_owned(),
                _ => tag.to_owned(),
            }
        };
        for tag in [
            "",
            ":",
            "a:",
            ":b",
            "reg/app:1",
            "reg:5000/app",
            "reg:5000/app:v1",
            "app",
            "a:b:c",
            "reg/app:1/x",
            "ü:ß",
            "reg/äpp:1",
        ] {
            assert_eq!(repository(tag), reference(tag), "{tag:?}");
        }
        assert_eq!(repository("reg:5000/app:v1"), "reg:5000/app");
    }

    /// Superseded images first, then one-off ones, then reused ones; least recently used
    /// first within each (the kubelet's order), whatever their recency across classes.
    #[test]
    fn superseded_then_one_off_then_reused_each_least_recently_used_first() {
        let hour = 3600;
        let records = vec![
            // Reused: used 2 h after its arrival, the least recently used of all.
            rec("hot", 1000, 1000 + 2 * hour),
            // One-off: used within the hour of its arrival, recently.
            rec("scan-b", 20_000, 20_100),
            rec("scan-a", 19_000, 19_100),
            // Never used: one-off.
            rec("idle", 15_000, 0),
            // Came back once after a removal: reused even with a short span.
            rec("back", 18_000, 18_010),
            // Superseded by app:2.
            rec("app1", 500, 30_000),
            rec("app2", 20_500, 30_000),
        ];
        let returns: BTreeMap<ImageId, u32> =
            [(ImageId::new("sha256:back"), 1)].into_iter().collect();
        let tags: BTreeMap<RecordKey, Vec<String>> = [
            (records[5].key.clone(), vec!["reg/app:1".to_owned()]),
            (records[6].key.clone(), vec!["reg/app:2".to_owned()]),
            (records[0].key.clone(), vec!["reg/hot:1".to_owned()]),
        ]
        .into_iter()
        .collect();
        let ranked = rank(records, &returns, &tags);
        assert_eq!(
            order(&ranked),
            ["app1", "idle", "scan-a", "scan-b", "hot", "back", "app2"]
        );
        assert_eq!(ranked[0].1.superseded.as_deref(), Some("reg/app:2"));
        assert!(
            ranked[0]
                .1
                .describe()
                .contains("superseded by \"reg/app:2\"")
        );
        assert!(ranked[2].1.one_off && ranked[2].1.describe().contains("one-off"));
        assert!(!ranked[5].1.one_off && ranked[5].1.returns == 1);
        assert!(
            ranked[5]
                .1
                .describe()
                .contains("came back 1 time after a removal")
        );
    }

    #[test]
    fn a_repository_is_the_tag_without_its_tag() {
        assert_eq!(repository("reg/app:1"), "reg/app");
        assert_eq!(repository("localhost:5000/app:1"), "localhost:5000/app");
        assert_eq!(repository("localhost:5000/app"), "localhost:5000/app");
        assert_eq!(repository("app"), "app");
    }
}
