//! imagekeeper's opt-in `predictive` order (`imageGCPolicy = "predictive"`, issue 39): the
//! eligible images ranked by the estimated time to their next use, furthest first, as Belady's
//! MIN (the clairvoyant reference `simulate` runs) would with the future known. The estimate
//! comes from each image's own recorded history (schema 5's use intervals and pulls, kept across
//! restarts), in the spirit of the learned approximations of MIN in caching (Hawkeye, ISCA 2016;
//! LRB, NSDI 2020) that predict reuse from past accesses, with no model to train:
//!
//! 1. *superseded*: a newer tag of its repository is listed (`adaptive`'s evidence): no next
//!    use is expected, it goes first;
//! 2. *rhythm*: its uses start at the same time of day (or of the week) on different days,
//!    each gap between starts a whole number of periods within [`RHYTHM_TOLERANCE_DIVISOR`]ths
//!    of one: the next use is the next occurrence of that phase (a rhythm that missed two
//!    occurrences is broken, and the mean gap takes over);
//! 3. *mean gap*: it came back after an idle gap at least once: the gaps between the end of one
//!    use and the start of the next, recent ones weighted more (each gap counts half as much as
//!    the one [`GAP_HALF_LIFE`] gaps newer); the estimate is that mean, or the time it has been
//!    idle when longer (an image overdue by its own measure has drifted cold: Lindy's rule);
//! 4. *priors* for an image with one use or none: [`ONE_OFF_PRIOR`] (or its idle time, when
//!    longer) when `adaptive` calls it one-off or it was never used, else (used for
//!    `adaptive::REUSE_SPAN` or more in one stretch) its idle time, at least `REUSE_SPAN`.
//!
//! Estimates are compared in buckets of about 19 % (four per power of two of seconds): within
//! a bucket, and for the priors' equal estimates, `adaptive`'s classes decide, then the kubelet's
//! order (least recently used, then first detected), then the larger image first (fewer
//! removals free the target), then the key. Size never overrides an estimate: with a re-pull's
//! cost equal to the image's size, a byte freed costs the same whatever image it comes from.
//!
//! Invariants: a pure function of (records, histories, journal's returns, tags, `now`), in
//! integer arithmetic: the same inputs give the same order, byte for byte. The order only
//! changes which eligible image the space walk removes first; every rule that keeps an image is
//! applied unchanged by the walk and the last look (as for `adaptive`). Cost per space walk
//! (`predictive_walk.rs`): the ranked images' use and pull rows copied from the store's
//! history mirror (bounded by the journal's retention), one record lookup per listed image,
//! one sort of the listed images.

use std::collections::BTreeMap;
use std::time::Duration;

use foldhash::{HashMap, HashMapExt};
use serde::Serialize;

use super::adaptive::{self, AdaptiveRank, ListedTags};
use super::signals::KnownUse;
use super::sorted_runs::sort_runs;
use crate::model::{
    ImageRecord, JournalEntry, PullEntry, PullKey, RecordKey, UnixNanos, UseInterval, UseKey,
};
use crate::store::{HistoryRows, JournalKey, KeyParts, StoredRecord};

const SEC: i64 = 1_000_000_000;
const HOUR: i64 = 3600 * SEC;
const DAY: i64 = 24 * HOUR;
const WEEK: i64 = 7 * DAY;

/// The estimate of an image that one use (a one-off) or none says little about: a week, about
/// the time the journal and the histories keep.
pub const ONE_OFF_PRIOR: Duration = Duration::from_secs(7 * 24 * 3600);

/// A gap counts half as much as the gap this many newer.
pub const GAP_HALF_LIFE: u32 = 4;

/// A rhythm's starts may stray from the period's multiple by 1/this of the period (2 h a day,
/// 14 h a week).
pub const RHYTHM_TOLERANCE_DIVISOR: i64 = 12;

/// The rhythms looked for, shortest first.
const PERIODS: [(i64, &str); 2] = [(DAY, "daily"), (WEEK, "weekly")];

/// At most this many of the newest gaps are read (older ones weigh under 1/2^8 of the newest).
const GAPS_READ: usize = 32;

/// One image's recorded history: its use intervals (start, last seen) and its pulls.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ImageHistory {
    /// Its use intervals.
    pub uses: Vec<(UnixNanos, UnixNanos)>,
    /// Its pulls' times.
    pub pulls: Vec<UnixNanos>,
}

/// The histories of `records` (the images being ranked), each table read once: for each
/// position, the index of its history in the returned list (`None`: no row names it). Rows are
/// grouped by a hash map of the keys the rows name (at most the tables' rows), so no record's
/// key is cloned; each history keeps its rows in table order, as the tables list them.
pub fn histories(
    records: &[StoredRecord],
    uses: &[(UseKey, UseInterval)],
    pulls: &[(PullKey, PullEntry)],
) -> (Vec<Option<u32>>, Vec<ImageHistory>) {
    let mut index: HashMap<&RecordKey, u32> = HashMap::new();
    let mut histories: Vec<ImageHistory> = Vec::new();
    let mut slot = |key| {
        let next = u32::try_from(histories.len()).expect("fewer than 4G history rows");
        let at = *index.entry(key).or_insert(next);
        if at == next {
            histories.push(ImageHistory::default());
        }
        at as usize
    };
    let mut use_slots = Vec::with_capacity(uses.len());
    for (key, _) in uses {
        use_slots.push(slot(&key.key));
    }
    let mut pull_slots = Vec::with_capacity(pulls.len());
    for (key, _) in pulls {
        pull_slots.push(slot(&key.key));
    }
    for ((key, interval), at) in uses.iter().zip(use_slots) {
        histories[at]
            .uses
            .push((key.started_at, interval.last_seen.max(key.started_at)));
    }
    for ((key, _), at) in pulls.iter().zip(pull_slots) {
        histories[at].pulls.push(key.at);
    }
    let of = records.iter().map(|r| index.get(&r.key).copied()).collect();
    (of, histories)
}

/// What an estimate came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
#[non_exhaustive]
pub enum Basis {
    /// A newer tag of its repository is listed: not expected again.
    Superseded,
    /// Its uses start at one phase of a day or a week.
    Rhythm {
        /// The period in seconds (a day or a week).
        period_s: i64,
        /// Seconds into the period (UTC days; weeks from the unix epoch's Thursday).
        phase_s: i64,
        /// How many use starts showed it.
        starts: u32,
    },
    /// The weighted mean of its idle gaps.
    MeanGap {
        /// The weighted mean in seconds.
        mean_s: i64,
        /// How many gaps it weighs.
        gaps: u32,
    },
    /// One use within `REUSE_SPAN` of its arrival, or none: `ONE_OFF_PRIOR` (a week).
    PriorOneOff,
    /// One stretch of use of `REUSE_SPAN` or more: its idle time, at least `REUSE_SPAN`.
    PriorReused,
}

/// When an image is expected to be used next, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Estimate {
    /// Seconds from `now` to the expected next use; `None`: not expected.
    pub next_use_in_s: Option<i64>,
    /// Seconds since its last known use (or its detection, when never used).
    pub idle_s: i64,
    /// What the estimate rests on.
    pub basis: Basis,
}

/// Where the predictive order puts one image, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct PredictiveRank {
    /// The estimate.
    pub estimate: Estimate,
    /// The adaptive class that breaks ties.
    pub adaptive: AdaptiveRank,
    /// What the cluster knows of its next use (`clusterSignals`), which places it instead of
    /// the estimate (`signals.rs`' rule): `now`, `at <RFC 3339>`, `current`, `rollback`,
    /// `superseded`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub known: Option<KnownUse>,
}

fn secs(nanos: i64) -> String {
    crate::format::go_duration(Duration::from_secs(
        nanos.max(0).unsigned_abs() / SEC as u64,
    ))
}

impl PredictiveRank {
    /// Why the image ranks where it does, for `explain`.
    pub fn describe(&self) -> String {
        let e = &self.estimate;
        let next = match e.next_use_in_s {
            None => "not expected again".to_owned(),
            Some(s) => format!("next use in {}", secs(s.saturating_mul(SEC))),
        };
        let from = match e.basis {
            Basis::Superseded => "superseded by a newer tag of its repository".to_owned(),
            Basis::Rhythm {
                period_s,
                phase_s,
                starts,
            } => {
                let name = PERIODS
                    .iter()
                    .find(|(p, _)| *p == period_s.saturating_mul(SEC))
                    .map_or("periodic", |(_, n)| n);
                format!(
                    "{name} rhythm from {starts} use starts, at {} into the {}",
                    secs(phase_s.saturating_mul(SEC)),
                    if name == "weekly" { "week" } else { "day" }
                )
            }
            Basis::MeanGap { mean_s, gaps } => format!(
                "mean gap {} over {gaps} gap{}, idle {}",
                secs(mean_s.saturating_mul(SEC)),
                if gaps == 1 { "" } else { "s" },
                secs(e.idle_s.saturating_mul(SEC))
            ),
            Basis::PriorOneOff => format!(
                "prior for a one-off image ({}, or its idle time {} when longer)",
                crate::format::go_duration(ONE_OFF_PRIOR),
                secs(e.idle_s.saturating_mul(SEC))
            ),
            Basis::PriorReused => format!(
                "prior for one long use (its idle time {}, at least {})",
                secs(e.idle_s.saturating_mul(SEC)),
                crate::format::go_duration(adaptive::REUSE_SPAN)
            ),
        };
        match self.known {
            None => format!("predictive: {next} ({from})"),
            Some(known) => format!(
                "predictive: {}, known to the cluster, in place of its estimate {next} ({from})",
                known.describe()
            ),
        }
    }

    /// The estimate's bucket, larger first: four per power of two of seconds (not expected:
    /// above all).
    #[cfg(test)]
    fn bucket(&self) -> u32 {
        bucket_of(&self.estimate)
    }
}

/// An estimate's bucket, larger first (see [`PredictiveRank`]'s ordering).
#[cfg(test)]
fn bucket_of(estimate: &Estimate) -> u32 {
    match estimate.next_use_in_s {
        None => u32::MAX,
        Some(s) => bucket(s.max(0).unsigned_abs()),
    }
}

/// Four buckets per power of two: the bit length, then the two bits below the top one.
pub(crate) fn bucket(s: u64) -> u32 {
    if s < 4 {
        return s as u32;
    }
    let bits = 64 - s.leading_zeros();
    let below = ((s >> (bits - 3)) & 0b11) as u32;
    bits * 4 + below
}

/// Stretches of use less than this apart are one (a pull, its container's start and the
/// record's mark are one use; the store's records keep last uses apart by a nanosecond).
pub const MERGE_GAP: Duration = Duration::from_secs(60);

/// Buffers one ranking reuses from image to image (no allocation per image once warm).
#[derive(Debug, Default)]
struct Scratch {
    points: Vec<(i64, i64)>,
    /// `sorted_runs`' buffer for `points`.
    merged: Vec<(i64, i64)>,
    sessions: Vec<(i64, i64)>,
    starts: Vec<i64>,
}

/// The history's stretches of use, oldest first, those less than [`MERGE_GAP`] apart merged:
/// use intervals, pulls (an instant each) and the record's last use; into `out`.
fn sessions(
    last_used: UnixNanos,
    history: &ImageHistory,
    points: &mut Vec<(i64, i64)>,
    merged: &mut Vec<(i64, i64)>,
    out: &mut Vec<(i64, i64)>,
) {
    points.clear();
    points.extend(history.uses.iter().map(|(s, e)| (s.0, e.0.max(s.0))));
    points.extend(history.pulls.iter().map(|p| (p.0, p.0)));
    if last_used != UnixNanos::NEVER {
        points.push((last_used.0, last_used.0));
    }
    // A few runs already in order (the open uses, the closed ones, the pulls, each by
    // start): merged (`sorted_runs.rs`), the same points as a sort from scratch.
    sort_runs(points, merged);
    out.clear();
    for &(s, e) in points.iter() {
        match out.last_mut() {
            Some(last) if s < last.1.saturating_add(MERGE_GAP.as_nanos() as i64) => {
                last.1 = last.1.max(e)
            }
            _ => out.push((s, e)),
        }
    }
}

/// `x` modulo `p` in (-p/2, p/2].
fn centred(x: i64, p: i64) -> i64 {
    let r = x.rem_euclid(p);
    if r > p / 2 { r - p } else { r }
}

/// A daily or weekly rhythm in the use starts: (period, anchor, starts), the anchor a start
/// time the next ones follow by whole periods.
fn rhythm(starts: &[i64]) -> Option<(i64, i64, u32)> {
    if starts.len() < 2 {
        return None;
    }
    let recent = &starts[starts.len().saturating_sub(GAPS_READ + 1)..];
    for (period, _) in PERIODS {
        let tolerance = period / RHYTHM_TOLERANCE_DIVISOR;
        let regular = recent.windows(2).all(|w| {
            let d = w[1] - w[0];
            let k = (d + period / 2) / period;
            (1..=3).contains(&k) && (d - k * period).abs() <= tolerance
        });
        if regular {
            let newest = recent[recent.len() - 1];
            let n = recent.len() as i64;
            let mean_offset = recent
                .iter()
                .map(|s| centred(s - newest, period))
                .sum::<i64>()
                / n;
            return Some((period, newest + mean_offset, recent.len() as u32));
        }
    }
    None
}

/// The estimate of one image at `now` (see the module's rules), in `scratch`'s buffers, from
/// its adaptive rank.
#[cfg(test)]
fn estimate_in(
    scratch: &mut Scratch,
    record: &ImageRecord,
    history: &ImageHistory,
    adaptive: &AdaptiveRank,
    now: UnixNanos,
) -> Estimate {
    let superseded = adaptive.superseded.is_some();
    estimate_of(scratch, record, history, superseded, adaptive.one_off, now)
}

/// The estimate from a rhythm of the session starts, when they keep one and its next
/// occurrence is at most two periods after the newest start not yet missed by more than the
/// tolerance.
fn rhythm_estimate(starts: &[i64], idle_s: i64, now: UnixNanos) -> Option<Estimate> {
    let (period, anchor, count) = rhythm(starts)?;
    let tolerance = period / RHYTHM_TOLERANCE_DIVISOR;
    // The first occurrence after the newest start not yet missed by more than the
    // tolerance.
    let k = ((now.0 - tolerance - anchor).max(0) + period - 1) / period;
    let k = k.max(1);
    if k > 2 {
        return None;
    }
    let next = anchor + k * period;
    Some(Estimate {
        next_use_in_s: Some((next - now.0).max(0) / SEC),
        idle_s,
        basis: Basis::Rhythm {
            period_s: period / SEC,
            phase_s: anchor.rem_euclid(period) / SEC,
            starts: count,
        },
    })
}

/// The weighted mean of the newest gaps between sessions (at least two), in nanoseconds,
/// with how many gaps it read (weights in fixed point, the newest 1 << 20).
fn weighted_mean_gap(sessions: &[(i64, i64)]) -> (i64, usize) {
    let gaps = sessions.len() - 1;
    let recent = gaps.min(GAPS_READ);
    let (mut sum, mut weights) = (0i128, 0i128);
    let newest_first = sessions.windows(2).rev().map(|w| w[1].0 - w[0].1);
    for (age, gap) in newest_first.take(recent).enumerate() {
        // 2^(-age / GAP_HALF_LIFE) in fixed point (1 << 20), by halving every half-life
        // and a linear step within.
        let halvings = age as u32 / GAP_HALF_LIFE;
        let within = (age as u32 % GAP_HALF_LIFE) as i128;
        let w = ((1i128 << 20) >> halvings.min(40)) * (2 * GAP_HALF_LIFE as i128 - within)
            / (2 * GAP_HALF_LIFE as i128);
        sum += i128::from(gap) * w;
        weights += w;
    }
    let mean = if weights > 0 {
        (sum / weights) as i64
    } else {
        0
    };
    (mean, recent)
}

/// The estimate of one image at `now` (see the module's rules), in `scratch`'s buffers:
/// `superseded` and `one_off` are its adaptive evidence.
fn estimate_of(
    scratch: &mut Scratch,
    record: &ImageRecord,
    history: &ImageHistory,
    superseded: bool,
    one_off: bool,
    now: UnixNanos,
) -> Estimate {
    sessions(
        record.last_used,
        history,
        &mut scratch.points,
        &mut scratch.merged,
        &mut scratch.sessions,
    );
    let sessions = &scratch.sessions;
    let last_end = sessions.last().map_or(record.first_detected.0, |s| s.1);
    let idle = (now.0 - last_end).max(0);
    let idle_s = idle / SEC;
    let at_least = |floor: i64| Some(floor.max(idle) / SEC);
    if superseded {
        return Estimate {
            next_use_in_s: None,
            idle_s,
            basis: Basis::Superseded,
        };
    }
    scratch.starts.clear();
    scratch.starts.extend(sessions.iter().map(|s| s.0));
    if let Some(estimate) = rhythm_estimate(&scratch.starts, idle_s, now) {
        return estimate;
    }
    if sessions.len() >= 2 {
        let (mean, recent) = weighted_mean_gap(sessions);
        return Estimate {
            next_use_in_s: at_least(mean),
            idle_s,
            basis: Basis::MeanGap {
                mean_s: mean / SEC,
                gaps: recent as u32,
            },
        };
    }
    if one_off || sessions.is_empty() {
        Estimate {
            next_use_in_s: at_least(ONE_OFF_PRIOR.as_secs() as i64 * SEC),
            idle_s,
            basis: Basis::PriorOneOff,
        }
    } else {
        Estimate {
            next_use_in_s: at_least(adaptive::REUSE_SPAN.as_secs() as i64 * SEC),
            idle_s,
            basis: Basis::PriorReused,
        }
    }
}

/// `records` in the predictive order at `now`, each with its rank: `tags` are their repo tags
/// by position, `journal` gives the returns, `uses` and `pulls` the histories (rows of images
/// not ranked are read and left). The ranking itself is [`rank_positions`], the space walk's.
pub fn rank_listed(
    records: Vec<StoredRecord>,
    tags: &ListedTags<'_>,
    journal: &[(JournalKey, JournalEntry)],
    uses: &[(UseKey, UseInterval)],
    pulls: &[(PullKey, PullEntry)],
    now: UnixNanos,
) -> Vec<(StoredRecord, PredictiveRank)> {
    rank_listed_with(records, tags, journal, uses, pulls, &[], now)
}

/// [`rank_listed`] with what the cluster knows of each record's next use, by position (empty:
/// nothing known), as the space walk places them.
pub fn rank_listed_with(
    records: Vec<StoredRecord>,
    tags: &ListedTags<'_>,
    journal: &[(JournalKey, JournalEntry)],
    uses: &[(UseKey, UseInterval)],
    pulls: &[(PullKey, PullEntry)],
    known: &[Option<KnownUse>],
    now: UnixNanos,
) -> Vec<(StoredRecord, PredictiveRank)> {
    let (history_of, histories) = histories(&records, uses, pulls);
    let mut ranks: Vec<PredictiveRank> = Vec::with_capacity(records.len());
    let order = {
        let keys: Vec<KeyParts<'_>> = records
            .iter()
            .map(|r| adaptive::key_parts(&r.key))
            .collect();
        let by_id = adaptive::returns_by_id(journal);
        let returns: Vec<u32> = if by_id.is_empty() {
            vec![0; keys.len()]
        } else {
            keys.iter()
                .map(|(id, _)| by_id.get(id).copied().unwrap_or(0))
                .collect()
        };
        let listing = Listing {
            keys: &keys,
            tags,
            history_of: &history_of,
            histories: &histories,
            returns: &returns,
            known,
        };
        rank_positions(&listing, |i| records[i].record, now, Some(&mut ranks))
    };
    let mut slots: Vec<Option<(StoredRecord, PredictiveRank)>> =
        records.into_iter().zip(ranks).map(Some).collect();
    order
        .iter()
        .filter_map(|&at| slots[at as usize].take())
        .collect()
}

/// What the ranking reads of the images besides their records, by position: their keys (the
/// last tie-break, and the returns' lookup by id), their repo tags, their histories (by index
/// into `histories`; `None`: no row names it) and how many times the journal saw each one's
/// image id come back.
pub(crate) struct Listing<'a, 'k, 't> {
    pub(crate) keys: &'a [KeyParts<'k>],
    pub(crate) tags: &'a ListedTags<'t>,
    pub(crate) history_of: &'a [Option<u32>],
    pub(crate) histories: &'a [ImageHistory],
    pub(crate) returns: &'a [u32],
    /// What the cluster knows of each one's next use, by position (`signals.rs`); empty: nothing
    /// known of any, the predictive order alone.
    pub(crate) known: &'a [Option<KnownUse>],
}

/// The predictive ranking of `listing`'s images (`record(i)` the record of position `i`) at
/// `now`: their positions in the predictive order, and each position's rank pushed to `ranks`
/// when given (the walk needs the order only). Images are indexed by position, each estimate
/// is computed once in reused buffers, and one sort orders positions by a key of integers
/// (bucket, class, last used, first detected, size; a 64-bit prefix of it first), the keys
/// compared only on a full tie; no map is keyed by an image's key.
pub(crate) fn rank_positions(
    listing: &Listing<'_, '_, '_>,
    record: impl Fn(usize) -> ImageRecord,
    now: UnixNanos,
    mut ranks: Option<&mut Vec<PredictiveRank>>,
) -> Vec<u32> {
    let keys = listing.keys;
    let superseded = adaptive::superseded_among(keys, |i| record(i).first_detected, listing.tags);
    let empty = ImageHistory::default();
    let mut scratch = Scratch::default();
    // Per position: (place: the estimate's bucket, larger first, or the known use's, see
    // `signals::place`; class; last used; first detected; size, larger first).
    let mut sort_keys: Vec<SortKey> = Vec::with_capacity(keys.len());
    let mut buckets: Vec<Option<u32>> = Vec::with_capacity(keys.len());
    for (position, newer) in superseded.into_iter().enumerate() {
        let r = record(position);
        let returns = listing.returns.get(position).copied().unwrap_or(0);
        let one_off = adaptive::is_one_off(&r, returns);
        let history =
            listing.history_of[position].map_or(&empty, |at| &listing.histories[at as usize]);
        let estimate = estimate_of(&mut scratch, &r, history, newer.is_some(), one_off, now);
        let bucket = estimate_bucket(&estimate);
        sort_keys.push((
            known_place(bucket, None, now),
            adaptive::class_of(newer.is_some(), one_off),
            r.last_used.0,
            r.first_detected.0,
            u64::MAX - r.size,
        ));
        buckets.push(bucket);
        if let Some(ranks) = ranks.as_deref_mut() {
            ranks.push(PredictiveRank {
                estimate,
                adaptive: adaptive::rank_one(&r, returns, newer),
                known: listing.known.get(position).copied().flatten(),
            });
        }
    }
    place_known(&mut sort_keys, &buckets, listing.known, now);
    // One sort of (prefix, position) pairs: equal prefixes compare the whole key, then the
    // image's key, then the position (as a stable sort would).
    let prefix = SortPrefix::of(&sort_keys);
    let mut order: Vec<(u64, u32)> = sort_keys
        .iter()
        .enumerate()
        .map(|(position, key)| {
            (
                prefix.of_key(key),
                u32::try_from(position).expect("fewer than 4G listed images"),
            )
        })
        .collect();
    order.sort_unstable_by(|a, b| {
        a.0.cmp(&b.0).then_with(|| {
            let (x, y) = (a.1 as usize, b.1 as usize);
            sort_keys[x]
                .cmp(&sort_keys[y])
                .then_with(|| keys[x].cmp(&keys[y]))
                .then(x.cmp(&y))
        })
    });
    order.into_iter().map(|(_, position)| position).collect()
}

/// The predictive order's first sort key of an image (smaller: removed first) from its
/// estimate's bucket (`None`: not expected again) and its known use at `now` (see `signals.rs`' rule).
pub(crate) fn known_place(bucket: Option<u32>, known: Option<KnownUse>, now: UnixNanos) -> u32 {
    match known {
        None => estimate_place(bucket) * 4,
        Some(KnownUse::Superseded) => 0,
        Some(KnownUse::Rollback) => estimate_place(Some(rollback_bucket())) * 4 + 1,
        Some(KnownUse::Current) => {
            (estimate_place(bucket) * 4).max(estimate_place(Some(rollback_bucket())) * 4 + 2)
        }
        Some(KnownUse::At(t)) => {
            let s = (t.0.saturating_sub(now.0)).max(0) / SEC;
            estimate_place(Some(self::bucket(s.unsigned_abs()))) * 4 + 2
        }
        Some(KnownUse::Now) => u32::MAX,
    }
}

/// The bucket a rollback image's next use is taken to be in: the one-off prior's (a week,
/// about what the journal and the histories keep).
fn rollback_bucket() -> u32 {
    bucket(ONE_OFF_PRIOR.as_secs())
}

/// The place of an estimate alone: 0 for "not expected again", else 1 + (255 - bucket), so
/// that a nearer estimate (a smaller bucket) is removed later.
fn estimate_place(bucket: Option<u32>) -> u32 {
    match bucket {
        None => 0,
        Some(b) => 1 + 255u32.saturating_sub(b),
    }
}

/// An estimate's bucket, `None` for "not expected again".
fn estimate_bucket(estimate: &Estimate) -> Option<u32> {
    estimate
        .next_use_in_s
        .map(|s| bucket(s.max(0).unsigned_abs()))
}

/// Replaces the places of the images the cluster knows a next use of (`known`, by position;
/// empty: none) with the known use's ([`known_place`]).
fn place_known(
    sort_keys: &mut [SortKey],
    buckets: &[Option<u32>],
    known: &[Option<KnownUse>],
    now: UnixNanos,
) {
    if known.iter().all(Option::is_none) {
        return;
    }
    for (position, key) in sort_keys.iter_mut().enumerate() {
        if let Some(k) = known.get(position).copied().flatten() {
            key.0 = known_place(buckets[position], Some(k), now);
        }
    }
}

/// What the predictive order compares, per image, before its key: (estimate's bucket, larger
/// first; class; last used; first detected; size, larger first).
type SortKey = (u32, u8, i64, i64, u64);

/// A 64-bit prefix of a [`SortKey`]'s order: the bucket (32 bits), the class (8 bits) and
/// the last use's top 24 significant bits above the listing's earliest last use. Monotone:
/// a key ordered before another never has a larger prefix, so ordering by prefix and then,
/// on equal prefixes, by the whole key is the keys' order (the sort moves 16 bytes and
/// compares one word for nearly every pair).
struct SortPrefix {
    earliest: i64,
    shift: u32,
}

/// The bits of the last use in a [`SortPrefix`].
const PREFIX_LAST_USED_BITS: u32 = 24;

impl SortPrefix {
    fn of(keys: &[SortKey]) -> SortPrefix {
        let earliest = keys.iter().map(|k| k.2).min().unwrap_or(0);
        let latest = keys.iter().map(|k| k.2).max().unwrap_or(0);
        let span_bits = u64::BITS - latest.abs_diff(earliest).leading_zeros();
        SortPrefix {
            earliest,
            shift: span_bits.saturating_sub(PREFIX_LAST_USED_BITS),
        }
    }

    fn of_key(&self, key: &SortKey) -> u64 {
        let last_used = key.2.abs_diff(self.earliest) >> self.shift;
        (u64::from(key.0) << 32) | (u64::from(key.1) << PREFIX_LAST_USED_BITS) | last_used
    }
}

/// The histories of the images of a list of `len` from the rows that name them (by index in
/// the list), as [`histories`] groups the tables' rows: for each index, the index of its
/// history (`None`: no row names it); each history keeps its rows in table order.
pub(crate) fn histories_of_rows(
    len: usize,
    rows: &HistoryRows,
) -> (Vec<Option<u32>>, Vec<ImageHistory>) {
    // Each image's rows counted first, so that its history is allocated once.
    let mut counts: Vec<(u32, u32)> = vec![(0, 0); len];
    for &(at, _, _) in &rows.uses {
        counts[at as usize].0 += 1;
    }
    for &(at, _) in &rows.pulls {
        counts[at as usize].1 += 1;
    }
    let mut of: Vec<Option<u32>> = vec![None; len];
    let mut histories: Vec<ImageHistory> = Vec::new();
    let mut slot = |at: u32, histories: &mut Vec<ImageHistory>| {
        let next = u32::try_from(histories.len()).expect("fewer than 4G history rows");
        let index = *of[at as usize].get_or_insert(next);
        if index == next {
            let (uses, pulls) = counts[at as usize];
            histories.push(ImageHistory {
                uses: Vec::with_capacity(uses as usize),
                pulls: Vec::with_capacity(pulls as usize),
            });
        }
        index as usize
    };
    for &(at, started_at, last_seen) in &rows.uses {
        let index = slot(at, &mut histories);
        histories[index]
            .uses
            .push((started_at, last_seen.max(started_at)));
    }
    for &(at, pulled_at) in &rows.pulls {
        let index = slot(at, &mut histories);
        histories[index].pulls.push(pulled_at);
    }
    (of, histories)
}

/// `records` in the predictive order at `now`, each with its rank, from the journal (for the
/// returns), their repo tags by key and the use and pull tables (`gc --dry-run`, `inspect
/// explain`; the space walk gives the tags by position: [`rank_listed`]).
pub fn rank_predictive(
    records: Vec<StoredRecord>,
    journal: &[(JournalKey, JournalEntry)],
    tags: &BTreeMap<RecordKey, Vec<String>>,
    uses: &[(UseKey, UseInterval)],
    pulls: &[(PullKey, PullEntry)],
    now: UnixNanos,
) -> Vec<(StoredRecord, PredictiveRank)> {
    rank_predictive_with(records, journal, tags, uses, pulls, &BTreeMap::new(), now)
}

/// [`rank_predictive`] with what the cluster knows of the records' next uses, by key (the
/// dry run's, as the space walk places them).
pub fn rank_predictive_with(
    records: Vec<StoredRecord>,
    journal: &[(JournalKey, JournalEntry)],
    tags: &BTreeMap<RecordKey, Vec<String>>,
    uses: &[(UseKey, UseInterval)],
    pulls: &[(PullKey, PullEntry)],
    known: &BTreeMap<RecordKey, KnownUse>,
    now: UnixNanos,
) -> Vec<(StoredRecord, PredictiveRank)> {
    let listed = ListedTags::from_map(&records, tags);
    let known: Vec<Option<KnownUse>> = if known.is_empty() {
        Vec::new()
    } else {
        records.iter().map(|r| known.get(&r.key).copied()).collect()
    };
    rank_listed_with(records, &listed, journal, uses, pulls, &known, now)
}

#[cfg(test)]
#[path = "predictive_tests.rs"]
mod tests;
