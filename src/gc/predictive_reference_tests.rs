//! The predictive order's straightforward reference (as first written: maps keyed by the
//! images' keys, `adaptive`'s sort and then the predictive sort), and seeded generated nodes
//! to hold the space walk's ranking to it.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use super::super::adaptive::{self, AdaptiveRank};
use super::super::{ImageHistory, PredictiveRank};
use super::estimate;
use crate::model::{
    ImageId, ImageRecord, JournalEntry, PullEntry, PullKey, PullOrigin, RecordKey, Remover,
    UnixNanos, UseInterval, UseKey,
};
use crate::store::{JournalKey, StoredRecord};

/// The repository of a repo tag, as `adaptive` reads it.
fn repository(tag: &str) -> &str {
    match tag.rsplit_once(':') {
        Some((repo, tag)) if !tag.contains('/') => repo,
        _ => tag,
    }
}

fn superseded(
    records: &[StoredRecord],
    tags: &BTreeMap<RecordKey, Vec<String>>,
) -> BTreeMap<RecordKey, String> {
    let mut newest: BTreeMap<&str, (UnixNanos, &RecordKey, &str)> = BTreeMap::new();
    for r in records {
        for tag in tags.get(&r.key).into_iter().flatten() {
            let entry =
                newest
                    .entry(repository(tag))
                    .or_insert((r.record.first_detected, &r.key, tag));
            if (r.record.first_detected, &r.key) > (entry.0, entry.1) {
                *entry = (r.record.first_detected, &r.key, tag);
            }
        }
    }
    let mut out = BTreeMap::new();
    for r in records {
        let tags = tags.get(&r.key).map(Vec::as_slice).unwrap_or_default();
        let newer: Option<Vec<&str>> = tags
            .iter()
            .map(|tag| {
                newest
                    .get(repository(tag))
                    .filter(|(at, key, _)| *key != &r.key && *at > r.record.first_detected)
                    .map(|(_, _, newer)| *newer)
            })
            .collect();
        if let Some(newer) = newer.and_then(|n| n.first().copied())
            && !tags.is_empty()
        {
            out.insert(r.key.clone(), newer.to_owned());
        }
    }
    out
}

fn adaptive_rank(
    records: Vec<StoredRecord>,
    returns: &BTreeMap<ImageId, u32>,
    tags: &BTreeMap<RecordKey, Vec<String>>,
) -> Vec<(StoredRecord, AdaptiveRank)> {
    let superseded = superseded(&records, tags);
    let mut ranked: Vec<(StoredRecord, AdaptiveRank)> = records
        .into_iter()
        .map(|r| {
            let returns = returns.get(&r.key.image_id).copied().unwrap_or(0);
            let use_span = if r.record.last_used == UnixNanos::NEVER {
                Duration::ZERO
            } else {
                r.record.last_used.since(r.record.first_detected)
            };
            let rank = AdaptiveRank {
                one_off: returns == 0 && use_span < adaptive::REUSE_SPAN,
                returns,
                use_span,
                superseded: superseded.get(&r.key).cloned(),
            };
            (r, rank)
        })
        .collect();
    ranked.sort_by(|(a, ra), (b, rb)| {
        ra.class()
            .cmp(&rb.class())
            .then(a.record.last_used.cmp(&b.record.last_used))
            .then(a.record.first_detected.cmp(&b.record.first_detected))
            .then(a.key.cmp(&b.key))
    });
    ranked
}

fn histories(
    keys: &BTreeSet<&RecordKey>,
    uses: &[(UseKey, UseInterval)],
    pulls: &[(PullKey, PullEntry)],
) -> BTreeMap<RecordKey, ImageHistory> {
    let mut out: BTreeMap<RecordKey, ImageHistory> = BTreeMap::new();
    for (key, interval) in uses {
        if keys.contains(&key.key) {
            out.entry(key.key.clone())
                .or_default()
                .uses
                .push((key.started_at, interval.last_seen.max(key.started_at)));
        }
    }
    for (key, _) in pulls {
        if keys.contains(&key.key) {
            out.entry(key.key.clone()).or_default().pulls.push(key.at);
        }
    }
    out
}

/// The predictive order as first written.
pub fn rank(
    records: Vec<StoredRecord>,
    journal: &[(JournalKey, JournalEntry)],
    tags: &BTreeMap<RecordKey, Vec<String>>,
    uses: &[(UseKey, UseInterval)],
    pulls: &[(PullKey, PullEntry)],
    now: UnixNanos,
) -> Vec<(StoredRecord, PredictiveRank)> {
    let keys: BTreeSet<&RecordKey> = records.iter().map(|r| &r.key).collect();
    let histories = histories(&keys, uses, pulls);
    let returns = adaptive::returns(journal);
    let empty = ImageHistory::default();
    let mut ranked: Vec<(StoredRecord, PredictiveRank)> = adaptive_rank(records, &returns, tags)
        .into_iter()
        .map(|(r, adaptive)| {
            let history = histories.get(&r.key).unwrap_or(&empty);
            let estimate = estimate(&r.record, history, &adaptive, now);
            (
                r,
                PredictiveRank {
                    estimate,
                    adaptive,
                    known: None,
                },
            )
        })
        .collect();
    ranked.sort_by(|(a, ra), (b, rb)| {
        rb.bucket()
            .cmp(&ra.bucket())
            .then(ra.adaptive.class().cmp(&rb.adaptive.class()))
            .then(a.record.last_used.cmp(&b.record.last_used))
            .then(a.record.first_detected.cmp(&b.record.first_detected))
            .then(b.record.size.cmp(&a.record.size))
            .then(a.key.cmp(&b.key))
    });
    ranked
}

/// A generated node: what a ranking reads.
pub struct Node {
    pub records: Vec<StoredRecord>,
    pub tags: BTreeMap<RecordKey, Vec<String>>,
    pub journal: Vec<(JournalKey, JournalEntry)>,
    pub uses: Vec<(UseKey, UseInterval)>,
    pub pulls: Vec<(PullKey, PullEntry)>,
    pub now: UnixNanos,
}

const SEC: i64 = 1_000_000_000;
const MIN: i64 = 60 * SEC;
const HOUR: i64 = 60 * MIN;
const DAY: i64 = 24 * HOUR;

/// One of about `n` * 2 image ids, under the default handler or (one in five) `runc-b`.
fn random_key(rng: &mut fastrand::Rng, n: usize) -> RecordKey {
    RecordKey {
        image_id: ImageId::new(format!("sha256:{:04x}", rng.u32(0..(n as u32 * 2 + 4)))),
        runtime_handler: if rng.u8(0..5) == 0 {
            "runc-b".to_owned()
        } else {
            String::new()
        },
    }
}

/// When an image's uses start, before `now`: daily or weekly rhythms (some days missed),
/// a burst, a few uses anywhere, one use or none.
fn use_starts(rng: &mut fastrand::Rng, start: i64, now: UnixNanos) -> Vec<i64> {
    let mut starts: Vec<i64> = Vec::new();
    match rng.u8(0..6) {
        // Daily (or weekly) at one hour, jittered, some days missed.
        0 | 1 => {
            let period = if rng.bool() { DAY } else { 7 * DAY };
            let phase = rng.i64(0..24) * HOUR;
            let mut at = start + phase;
            while at < now.0 {
                if rng.u8(0..6) != 0 {
                    starts.push(at + rng.i64(-40..40) * MIN);
                }
                at += period;
            }
        }
        // A burst every few minutes.
        2 => {
            let mut at = start + rng.i64(0..10 * DAY);
            for _ in 0..rng.usize(2..40) {
                starts.push(at);
                at += rng.i64(1..20) * MIN;
            }
        }
        // A few uses anywhere.
        3 => starts.extend((0..rng.usize(1..5)).map(|_| start + rng.i64(0..10 * DAY))),
        // One use, or none.
        4 => starts.extend((0..rng.usize(0..2)).map(|_| start + rng.i64(0..10 * DAY))),
        _ => {}
    }
    starts.retain(|s| *s < now.0);
    starts
}

/// Adds the use rows (two in three, some open) and pull rows (one in three) of the uses at
/// `starts` to `node`; the newest end of a use is the image's last use.
fn push_uses_and_pulls(
    rng: &mut fastrand::Rng,
    key: &RecordKey,
    starts: &[i64],
    node: &mut Node,
) -> UnixNanos {
    let mut last_used = UnixNanos::NEVER;
    for s in starts {
        let end = (s + rng.i64(0..4) * 10 * MIN).min(node.now.0);
        last_used = last_used.max(UnixNanos(end));
        if rng.u8(0..3) != 0 {
            node.uses.push((
                UseKey {
                    closed: rng.u8(0..8) != 0,
                    started_at: UnixNanos(*s),
                    key: key.clone(),
                },
                UseInterval {
                    last_seen: UnixNanos(end),
                },
            ));
        }
        if rng.u8(0..3) == 0 {
            node.pulls.push((
                PullKey {
                    at: UnixNanos(*s),
                    key: key.clone(),
                },
                PullEntry {
                    size: 1,
                    origin: PullOrigin::Detected,
                    took: Duration::ZERO,
                    name: String::new(),
                },
            ));
        }
    }
    last_used
}

/// A removal of `key`'s image at some time of the ten days, re-pulled (at `now`) or not.
fn journal_row(
    rng: &mut fastrand::Rng,
    key: &RecordKey,
    start: i64,
    (first_detected, last_used): (UnixNanos, UnixNanos),
    now: UnixNanos,
) -> (JournalKey, JournalEntry) {
    (
        JournalKey {
            removed_at: UnixNanos(start + rng.i64(0..10 * DAY)),
            key: key.clone(),
        },
        JournalEntry {
            size: 1,
            first_detected,
            last_used,
            reason: None,
            rank: None,
            fs: None,
            remover: Remover::External,
            repulled_at: rng.bool().then_some(now),
        },
    )
}

/// Adds a ranked image to `node`: its repo tags (up to two) and its record (never used one
/// time in ten, a coarse size).
fn push_record(
    rng: &mut fastrand::Rng,
    key: RecordKey,
    (first_detected, last_used): (UnixNanos, UnixNanos),
    node: &mut Node,
) {
    let repo_tags: Vec<String> = (0..rng.usize(0..3))
        .map(|_| format!("reg/app-{}:{}", rng.u8(0..6), rng.u8(0..4)))
        .collect();
    node.tags.insert(key.clone(), repo_tags);
    node.records.push(StoredRecord {
        key,
        record: ImageRecord {
            first_detected,
            last_used: if rng.u8(0..10) == 0 {
                UnixNanos::NEVER
            } else {
                last_used
            },
            size: rng.u64(1..4) * 1000,
            pinned: false,
        },
    });
}

/// A node of 1..120 images (plus images with rows but no record) over ten days, from `seed`:
/// daily and weekly rhythms (some broken), bursts a few minutes apart, one-offs, never-used
/// images, a few repositories with several tags (superseded images), two runtime handlers,
/// re-pulled journal entries, and coarse times and sizes so every sort key ties somewhere.
pub fn generate(seed: u64) -> Node {
    let mut rng = fastrand::Rng::with_seed(seed);
    let start = 20_000 * DAY;
    let now = UnixNanos(start + 10 * DAY + rng.i64(0..DAY));
    let n = rng.usize(1..120);
    let extra = rng.usize(0..10);
    let mut node = Node {
        records: Vec::new(),
        tags: BTreeMap::new(),
        journal: Vec::new(),
        uses: Vec::new(),
        pulls: Vec::new(),
        now,
    };
    for i in 0..n + extra {
        let key = random_key(&mut rng, n);
        let starts = use_starts(&mut rng, start, now);
        let first_detected = UnixNanos(
            starts
                .iter()
                .min()
                .copied()
                .unwrap_or(start + rng.i64(0..10) * DAY),
        );
        let last_used = push_uses_and_pulls(&mut rng, &key, &starts, &mut node);
        let stamps = (first_detected, last_used);
        if rng.u8(0..6) == 0 {
            let row = journal_row(&mut rng, &key, start, stamps, now);
            node.journal.push(row);
        }
        if i >= n || node.tags.contains_key(&key) {
            // Rows of an image not ranked (or more rows of one ranked: the ranked images'
            // keys are distinct, as the listed images' and the store's are).
            continue;
        }
        push_record(&mut rng, key, stamps, &mut node);
    }
    // Rows in the tables' order (by time, then key), as the store lists them.
    node.uses.sort_by(|a, b| {
        (a.0.closed, a.0.started_at, &a.0.key).cmp(&(b.0.closed, b.0.started_at, &b.0.key))
    });
    node.pulls
        .sort_by(|a, b| (a.0.at, &a.0.key).cmp(&(b.0.at, &b.0.key)));
    node.journal
        .sort_by(|a, b| (a.0.removed_at, &a.0.key).cmp(&(b.0.removed_at, &b.0.key)));
    node
}
