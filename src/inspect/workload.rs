//! `imagekeeper inspect workload`: the node's recorded history (schema 5's use intervals, the
//! pull history, the journal and the unwatched stretches) written as a workload trace for
//! `imagekeeper simulate` (issue 26): JSON lines sorted by `at`, seconds relative to the first
//! event, a `node` line first, then `run` and `restart` lines, and the signal lines the agent
//! recorded (`cronjob`, `bound`, `rollout`: schema 7's `signals`, `workload_signals.rs`). The
//! output is a function of the file (and `--since`), never of the wall clock otherwise: the
//! same file gives the same bytes.
//!
//! The field names are the workload format's (docs/src/operators/inspect.md): `node`
//! {`capacity`, `other_used`, `pull_bytes_per_s`}, `policy` {`high`, `low`, `min_age_s`,
//! `max_age_s`}, `gc_period_s`; `run` {`image`, `size`, `for_s`}; `restart` {}.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{self, Write};
use std::time::Duration;

use crate::gc::WatchHistory;
use crate::inspect::NamesByKey;
use crate::model::{
    JournalEntry, PullEntry, PullKey, RecordKey, SignalEntry, UnixNanos, UseInterval, UseKey,
};
use crate::store::{JournalKey, StoredRecord};
use serde::{Serialize, Serializer};

#[path = "workload_signals.rs"]
mod signals;

/// The latest `start_unix_s` the trace's parser takes: 9999-12-31T23:59:59Z.
const MAX_START_UNIX_S: i64 = 253_402_300_799;

/// A pull rate when no pull imagekeeper made has a duration: 100 MB/s.
pub const DEFAULT_PULL_BYTES_PER_S: u64 = 100_000_000;
/// The image filesystem's size when no journal entry recorded one and no image has a size.
pub const DEFAULT_CAPACITY: u64 = 100_000_000_000;

/// Seconds as a JSON number: a whole number of seconds prints as an integer, anything else
/// with millisecond precision (rounded to the nearest millisecond).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Secs(i64);

impl Secs {
    fn of_nanos(nanos: i64) -> Secs {
        Secs(nanos)
    }

    fn of_duration(d: Duration) -> Secs {
        Secs(i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
    }
}

impl Serialize for Secs {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let ms = self.0.saturating_add(500_000).div_euclid(1_000_000);
        if ms % 1000 == 0 {
            s.serialize_i64(ms / 1000)
        } else {
            // Milliseconds below 2^53 are exact in an f64; the division prints the shortest
            // decimal that reads back as the same number.
            s.serialize_f64(ms as f64 / 1000.0)
        }
    }
}

#[derive(Serialize)]
struct NodeLine {
    at: Secs,
    node: Node,
    policy: Policy,
    gc_period_s: Secs,
    /// The unix second of the trace's start, the calendar the `cronjob` lines' schedules are
    /// read in: written only with signal lines, so a trace without them reads as before.
    #[serde(skip_serializing_if = "Option::is_none")]
    start_unix_s: Option<i64>,
}

#[derive(Serialize)]
struct Node {
    capacity: u64,
    other_used: u64,
    pull_bytes_per_s: u64,
}

#[derive(Serialize)]
struct Policy {
    high: i64,
    low: i64,
    min_age_s: Secs,
    max_age_s: Secs,
}

#[derive(Serialize)]
struct RunLine<'a> {
    at: Secs,
    run: Run<'a>,
}

#[derive(Serialize)]
struct Run<'a> {
    image: &'a str,
    size: u64,
    for_s: Secs,
}

#[derive(Serialize)]
struct RestartLine {
    at: Secs,
    restart: Empty,
}

#[derive(Serialize)]
struct Empty {}

/// What the operator may set instead of what the file knows.
#[derive(Clone, Copy, Debug)]
pub struct Overrides {
    /// The image filesystem's capacity in bytes (`--capacity`).
    pub capacity: Option<u64>,
    /// Bytes on it that are not images (`--other-used`).
    pub other_used: Option<u64>,
    /// The pull rate in bytes per second (`--pull-bytes-per-s`).
    pub pull_bytes_per_s: Option<u64>,
    /// The high threshold, percent.
    pub high: i64,
    /// The low threshold, percent.
    pub low: i64,
    /// MinAge.
    pub min_age: Duration,
    /// MaxAge (0: off).
    pub max_age: Duration,
    /// The GC period.
    pub gc_period: Duration,
}

/// What the workload is made from, as read from the file.
pub struct History<'a> {
    /// Every image record.
    pub records: &'a [StoredRecord],
    /// The names each record key had.
    pub names: &'a NamesByKey,
    /// The eviction journal.
    pub journal: &'a [(JournalKey, JournalEntry)],
    /// The use intervals (schema 5).
    pub uses: &'a [(UseKey, UseInterval)],
    /// The pull history (schema 5).
    pub pulls: &'a [(PullKey, PullEntry)],
    /// The meta table's values (the heartbeat and the unwatched stretches).
    pub meta: &'a [(String, i64)],
    /// The cluster signals' changes the agent recorded (schema 7), oldest first.
    pub signals: &'a [SignalEntry],
}

/// One event of the trace, in its sort order: time, then restarts, then signal lines (what
/// the cluster declared, in the order recorded), then runs by image, size and length.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    Restart {
        at: i64,
    },
    /// The `index`-th recorded signal line from the start on.
    Signal {
        at: i64,
        index: usize,
    },
    Run {
        at: i64,
        image: String,
        size: u64,
        for_nanos: i64,
    },
}

impl Event {
    fn key(&self) -> (i64, u8, usize, &str, u64, i64) {
        match self {
            Event::Restart { at } => (*at, 0, 0, "", 0, 0),
            Event::Signal { at, index } => (*at, 1, *index, "", 0, 0),
            Event::Run {
                at,
                image,
                size,
                for_nanos,
            } => (*at, 2, 0, image, *size, *for_nanos),
        }
    }
}

/// The name a record key's image goes by in the trace: its first repo tag, else its first repo
/// digest (as the runtime last listed them), else the name imagekeeper last pulled it by, else
/// its image id.
fn base_name(key: &RecordKey, names: &NamesByKey, pulled: &BTreeMap<&RecordKey, &str>) -> String {
    if let Some(n) = names.get(key) {
        if let Some(tag) = n.repo_tags.first() {
            return tag.clone();
        }
        if let Some(digest) = n.repo_digests.first() {
            return digest.clone();
        }
    }
    match pulled.get(key) {
        Some(name) if !name.is_empty() => (*name).to_owned(),
        _ => key.image_id.as_str().to_owned(),
    }
}

/// Writes the workload trace of `history` from `since` (inclusive) on.
pub fn write(
    w: &mut dyn Write,
    history: &History<'_>,
    since: Option<UnixNanos>,
    overrides: &Overrides,
) -> io::Result<()> {
    // The newest name and size each key was pulled with.
    let mut pulled: BTreeMap<&RecordKey, &str> = BTreeMap::new();
    let mut pulled_size: BTreeMap<&RecordKey, u64> = BTreeMap::new();
    for (k, e) in history.pulls {
        if !e.name.is_empty() {
            pulled.insert(&k.key, &e.name);
        }
        if e.size > 0 {
            pulled_size.insert(&k.key, e.size);
        }
    }
    let record_size: BTreeMap<&RecordKey, u64> = history
        .records
        .iter()
        .map(|r| (&r.key, r.record.size))
        .collect();
    let mut journal_size: BTreeMap<&RecordKey, u64> = BTreeMap::new();
    for (k, e) in history.journal {
        journal_size.insert(&k.key, e.size);
    }
    let size_of = |key: &RecordKey| -> u64 {
        [&record_size, &journal_size, &pulled_size]
            .iter()
            .filter_map(|m| m.get(key).copied())
            .find(|s| *s > 0)
            .unwrap_or(0)
    };
    let from = since.unwrap_or(UnixNanos(i64::MIN));
    let used: Vec<&(UseKey, UseInterval)> = history
        .uses
        .iter()
        .filter(|(k, _)| k.started_at >= from)
        .collect();
    // Names, made unique per image: a name two images went by (a tag that moved) is
    // followed by the image id.
    let keys: BTreeSet<&RecordKey> = used.iter().map(|(k, _)| &k.key).collect();
    let mut by_name: BTreeMap<String, BTreeSet<&str>> = BTreeMap::new();
    let mut named: BTreeMap<&RecordKey, String> = BTreeMap::new();
    for key in &keys {
        let name = base_name(key, history.names, &pulled);
        by_name
            .entry(name.clone())
            .or_default()
            .insert(key.image_id.as_str());
        named.insert(key, name);
    }
    for (key, name) in named.iter_mut() {
        if by_name.get(name.as_str()).is_some_and(|ids| ids.len() > 1) {
            *name = format!("{name}@{}", key.image_id.as_str());
        }
    }
    let mut events: Vec<Event> = used
        .iter()
        .map(|(k, v)| Event::Run {
            at: k.started_at.0,
            image: named.get(&k.key).cloned().unwrap_or_default(),
            size: size_of(&k.key),
            for_nanos: v.last_seen.0.saturating_sub(k.started_at.0).max(0),
        })
        .collect();
    let stored = |name: &str| {
        history
            .meta
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| *v)
    };
    for gap in WatchHistory::from_meta(stored).unwatched {
        if gap.to >= from {
            events.push(Event::Restart { at: gap.to.0 });
        }
    }
    let signal_lines = signals::split(history.signals, from);
    events.extend(
        signal_lines
            .timed
            .iter()
            .enumerate()
            .map(|(index, (at, _))| Event::Signal { at: *at, index }),
    );
    events.sort_by(|a, b| a.key().cmp(&b.key()));
    // The first event, else the start asked for (the lines of the state at the start alone).
    let t0 = events
        .first()
        .map_or_else(|| since.map_or(0, |s| s.0), |e| e.key().0);
    let has_signals = !signal_lines.at_start.is_empty() || !signal_lines.timed.is_empty();
    let start_unix_s = has_signals
        .then(|| t0.div_euclid(1_000_000_000))
        .filter(|s| (0..=MAX_START_UNIX_S).contains(s));
    let images_total: u64 = keys.iter().map(|k| size_of(k)).sum();
    let node = NodeLine {
        at: Secs(0),
        node: Node {
            capacity: overrides
                .capacity
                .or_else(|| known_capacity(history.journal))
                .unwrap_or_else(|| fitting_capacity(images_total, overrides.low)),
            other_used: overrides
                .other_used
                .or_else(|| known_other_used(history))
                .unwrap_or(0),
            pull_bytes_per_s: overrides
                .pull_bytes_per_s
                .or_else(|| measured_pull_rate(history.pulls))
                .unwrap_or(DEFAULT_PULL_BYTES_PER_S),
        },
        policy: Policy {
            high: overrides.high,
            low: overrides.low,
            min_age_s: Secs::of_duration(overrides.min_age),
            max_age_s: Secs::of_duration(overrides.max_age),
        },
        gc_period_s: Secs::of_duration(overrides.gc_period),
        start_unix_s,
    };
    line(w, &node)?;
    for signal in &signal_lines.at_start {
        signals::write_signal(w, Secs(0), signal)?;
    }
    for event in &events {
        match event {
            Event::Signal { at, index } => {
                if let Some((_, signal)) = signal_lines.timed.get(*index) {
                    signals::write_signal(w, Secs::of_nanos(at.saturating_sub(t0)), signal)?;
                }
            }
            Event::Restart { at } => line(
                w,
                &RestartLine {
                    at: Secs::of_nanos(at.saturating_sub(t0)),
                    restart: Empty {},
                },
            )?,
            Event::Run {
                at,
                image,
                size,
                for_nanos,
            } => line(
                w,
                &RunLine {
                    at: Secs::of_nanos(at.saturating_sub(t0)),
                    run: Run {
                        image,
                        size: *size,
                        for_s: Secs::of_nanos(*for_nanos),
                    },
                },
            )?,
        }
    }
    Ok(())
}

fn line(w: &mut dyn Write, value: &impl Serialize) -> io::Result<()> {
    serde_json::to_writer(&mut *w, value).map_err(io::Error::other)?;
    w.write_all(b"\n")
}

/// The image filesystem's size the newest journal entry with usage recorded.
fn known_capacity(journal: &[(JournalKey, JournalEntry)]) -> Option<u64> {
    journal
        .iter()
        .rev()
        .find_map(|(_, e)| e.fs.map(|fs| fs.capacity))
        .filter(|c| *c > 0)
}

/// What was used by other things than images at the newest GC removal that recorded usage:
/// the bytes used then minus the images present then (the records first detected by then and
/// the journal's images removed at or after it).
fn known_other_used(history: &History<'_>) -> Option<u64> {
    let (at, fs) = history
        .journal
        .iter()
        .rev()
        .find_map(|(k, e)| e.fs.map(|fs| (k.removed_at, fs)))?;
    let present_records: u64 = history
        .records
        .iter()
        .filter(|r| r.record.first_detected <= at)
        .map(|r: &StoredRecord| r.record.size)
        .sum();
    let present_removed: u64 = history
        .journal
        .iter()
        .filter(|(k, e)| k.removed_at >= at && e.first_detected <= at)
        .map(|(_, e)| e.size)
        .sum();
    Some(
        fs.used_before
            .saturating_sub(present_records.saturating_add(present_removed)),
    )
}

/// The pull rate of imagekeeper's own pulls: their bytes over their time.
fn measured_pull_rate(pulls: &[(PullKey, PullEntry)]) -> Option<u64> {
    let (bytes, nanos) = pulls
        .iter()
        .filter(|(_, e)| e.size > 0 && !e.took.is_zero())
        .fold((0u128, 0u128), |(b, n), (_, e)| {
            (b + u128::from(e.size), n + e.took.as_nanos())
        });
    if nanos == 0 {
        return None;
    }
    u64::try_from(bytes * 1_000_000_000 / nanos)
        .ok()
        .filter(|r| *r > 0)
}

/// With no recorded size, a filesystem where every image of the trace fits under the low
/// threshold (no pressure was recorded, so none is simulated).
fn fitting_capacity(images_total: u64, low: i64) -> u64 {
    let low = u64::try_from(low.clamp(1, 100)).unwrap_or(100);
    if images_total == 0 {
        return DEFAULT_CAPACITY;
    }
    images_total.saturating_mul(100).div_ceil(low)
}
