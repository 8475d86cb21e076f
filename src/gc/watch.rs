//! Watched time: what MaxAge measures an image's unused time over.
//!
//! Uses that happen while nothing watches the node (the agent down, or its detects failing)
//! are never seen, so an image used only then would look unused since its last seen use and
//! MaxAge could remove it at the first cycle after a long downtime. Each detect therefore
//! writes a heartbeat (`meta` `heartbeat`: the time it watched, written at every detect even
//! when nothing else changed: one commit per cycle), and a detect that finds the stored
//! heartbeat more than [`GAP_PERIODS`] watch periods before its own time records the stretch
//! between them as unwatched (`meta` `unwatched_<i>_from` / `unwatched_<i>_to`, at most
//! [`MAX_GAPS`] stretches, oldest first). An image's unused time for MaxAge is the time since
//! its last use (or first detection) minus the unwatched stretches after it.
//!
//! Invariants: the rule only ever under-counts watched time, never over-counts it, so MaxAge
//! removes no image earlier than "unused for longer than MaxAge of watched time": a whole
//! stretch between two heartbeats is unwatched, not only the part beyond the period; when
//! the list is full its two oldest stretches (oldest by time: the clock may have found them
//! out of order) merge into one spanning both that keeps their unwatched length
//! (`unwatched_<i>_nanos`): for an image unused since before it, exactly that length is left
//! out; for one unused since inside it, at most that length (never more than the part after
//! its last use), so an image may be kept a little longer, never removed sooner, and the error
//! stays bounded by one stretch. A file without a heartbeat (written before this rule) takes its
//! `last_detect` as the last heartbeat. The heartbeat follows the clock back like
//! `last_detect`; stretches are clipped to `now`. Pure: `now` and the stored values are
//! arguments; the manager writes the result in the detect's own batch (one transaction).

use std::time::Duration;

use serde::Serialize;

use crate::model::{ImageRecord, UnixNanos};
use crate::store::{Batch, meta_keys};

/// The time an image has been unused from: its last use, or, if it was never used, when it
/// was first detected (it has not been unused for longer than it has been known).
pub fn unused_since(record: &ImageRecord) -> UnixNanos {
    if record.last_used == UnixNanos::NEVER {
        record.first_detected
    } else {
        record.last_used
    }
}

/// The watch period when none is set: the kubelet's default ImageGCPeriod (5 minutes) and the
/// agent's default detect and GC periods.
pub const DEFAULT_WATCH_PERIOD: Duration = Duration::from_secs(300);

/// How many watch periods between two heartbeats make the stretch between them unwatched.
pub const GAP_PERIODS: u32 = 3;

/// How many unwatched stretches the store keeps; beyond it the oldest two merge.
pub const MAX_GAPS: usize = 8;

/// One stretch of time nothing watched: between a heartbeat and the next detect. A stretch
/// merged from several (when the list is full) spans them all and keeps, in `nanos`, only
/// their unwatched time, so the watched time between them is not lost.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Unwatched {
    /// The stretch's start.
    pub from: UnixNanos,
    /// The stretch's end.
    pub to: UnixNanos,
    /// The unwatched nanoseconds within `from..to` (all of it unless merged).
    pub nanos: i64,
}

impl Unwatched {
    /// The whole stretch `from..to` unwatched.
    pub fn between(from: UnixNanos, to: UnixNanos) -> Unwatched {
        Unwatched {
            from,
            to,
            nanos: to.0.saturating_sub(from.0).max(0),
        }
    }
}

/// The heartbeat and the unwatched stretches, as stored in `meta`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct WatchHistory {
    /// The last time a detect watched the node.
    pub heartbeat: Option<UnixNanos>,
    /// Unwatched stretches, oldest first, at most eight (`MAX_GAPS`; beyond it the oldest two
    /// merge).
    pub unwatched: Vec<Unwatched>,
}

impl WatchHistory {
    /// The history stored in `meta`, read through `get` (a meta name to its value). Without
    /// a heartbeat, `last_detect` stands for it (a file written before the heartbeat).
    pub fn from_meta(get: impl Fn(&str) -> Option<i64>) -> WatchHistory {
        let heartbeat = get(meta_keys::HEARTBEAT)
            .or_else(|| get(meta_keys::LAST_DETECT))
            .map(UnixNanos);
        let mut unwatched = Vec::new();
        for i in 0..MAX_GAPS {
            let (from, to) = meta_keys::unwatched(i);
            match (get(&from), get(&to)) {
                // A pair that does not hold together is skipped, not the end of the list.
                (Some(from), Some(to)) if from <= to => {
                    let span = to.saturating_sub(from);
                    let nanos = get(&meta_keys::unwatched_nanos(i))
                        .filter(|n| (0..=span).contains(n))
                        .unwrap_or(span);
                    unwatched.push(Unwatched {
                        from: UnixNanos(from),
                        to: UnixNanos(to),
                        nanos,
                    });
                }
                (Some(_), Some(_)) => {}
                _ => break,
            }
        }
        WatchHistory {
            heartbeat,
            unwatched,
        }
    }

    /// The history after a detect at `now` with watch period `period`: the heartbeat is
    /// `now`, and when the stored heartbeat is more than three periods (`GAP_PERIODS`) before
    /// `now` the stretch between them is unwatched (returned as the second value).
    pub fn after_detect(
        &self,
        now: UnixNanos,
        period: Duration,
    ) -> (WatchHistory, Option<Unwatched>) {
        let mut next = self.clone();
        next.heartbeat = Some(now);
        let gap_after = period.saturating_mul(GAP_PERIODS);
        let gap = self
            .heartbeat
            .filter(|&last| last != UnixNanos::NEVER && last < now && now.since(last) > gap_after)
            .map(|from| Unwatched::between(from, now));
        if let Some(gap) = gap {
            next.unwatched.push(gap);
            // Oldest first by time, whatever order the clock found them in (it goes back).
            next.unwatched.sort_by_key(|g| (g.from, g.to));
            while next.unwatched.len() > MAX_GAPS {
                // Merge the two oldest into one spanning both that keeps only their
                // unwatched time: the watched time between them is not lost, only where it
                // lies within the span (see `unwatched_between`).
                let first = next.unwatched.remove(0);
                let second = next.unwatched.remove(0);
                let (from, to) = (first.from.min(second.from), first.to.max(second.to));
                let span = to.0.saturating_sub(from.0);
                next.unwatched.insert(
                    0,
                    Unwatched {
                        from,
                        to,
                        nanos: first.nanos.saturating_add(second.nanos).min(span),
                    },
                );
            }
        }
        (next, gap)
    }

    /// Writes the history into `batch` (`meta` values, each written only when it differs, as
    /// notes: they commit, but do not count as a change that moves `last_detect`).
    pub fn write(&self, batch: &mut Batch) {
        if let Some(heartbeat) = self.heartbeat {
            batch.note_meta(meta_keys::HEARTBEAT, heartbeat.0);
        }
        for (i, gap) in self.unwatched.iter().enumerate() {
            let (from, to) = meta_keys::unwatched(i);
            batch.note_meta(from, gap.from.0);
            batch.note_meta(to, gap.to.0);
            batch.note_meta(meta_keys::unwatched_nanos(i), gap.nanos);
        }
    }

    /// The unwatched time between `from` and `now`: of each stretch, the part within
    /// `from..now`, and at most its unwatched nanoseconds (a merged stretch's watched time
    /// inside that part may then count as unwatched: never the other way round).
    pub fn unwatched_between(&self, from: UnixNanos, now: UnixNanos) -> Duration {
        self.unwatched
            .iter()
            .map(|gap| {
                let start = gap.from.max(from);
                let end = gap.to.min(now);
                if end > start {
                    let nanos = u64::try_from(gap.nanos).unwrap_or(0);
                    end.since(start).min(Duration::from_nanos(nanos))
                } else {
                    Duration::ZERO
                }
            })
            .fold(Duration::ZERO, Duration::saturating_add)
    }

    /// How long `record` has been unused at `now`, counting only watched time: the time
    /// since its last use (or first detection) minus the unwatched stretches after it.
    pub fn watched_unused(&self, record: &ImageRecord, now: UnixNanos) -> Duration {
        let since = unused_since(record);
        now.since(since)
            .saturating_sub(self.unwatched_between(since, now))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use super::*;
    use crate::gc::{GcConfig, GcPolicy, ImageGcManager};
    use crate::model::{ContainerState, ImageId, RuntimeContainer, RuntimeImage};
    use crate::runtime::ScriptedRuntime;
    use crate::store::{BatchOp, Store};

    const MIN: i64 = 60;
    const HOUR: i64 = 3600;
    const PERIOD: Duration = Duration::from_secs(300);

    fn t(secs: i64) -> UnixNanos {
        UnixNanos::from_secs(secs)
    }

    fn gap(from: i64, to: i64) -> Unwatched {
        Unwatched::between(t(from), t(to))
    }

    fn used_at(secs: i64) -> ImageRecord {
        ImageRecord {
            first_detected: t(1),
            last_used: t(secs),
            size: 1,
            pinned: false,
        }
    }

    /// A stretch between heartbeats longer than three periods is unwatched, a shorter one is
    /// not; the clock going back records nothing; the heartbeat is always the detect's time.
    #[test]
    fn a_stretch_is_unwatched_only_beyond_three_periods() {
        let cases = [
            // (stored heartbeat, now, the stretch found)
            (None, 10 * HOUR, None),
            (Some(10 * HOUR - 15 * MIN), 10 * HOUR, None),
            (
                Some(10 * HOUR - 15 * MIN - 1),
                10 * HOUR,
                Some(gap(10 * HOUR - 15 * MIN - 1, 10 * HOUR)),
            ),
            (Some(2 * HOUR), 10 * HOUR, Some(gap(2 * HOUR, 10 * HOUR))),
            // The clock went back: no stretch, the heartbeat follows the clock.
            (Some(20 * HOUR), 10 * HOUR, None),
        ];
        for (stored, now, want) in cases {
            let before = WatchHistory {
                heartbeat: stored.map(t),
                unwatched: Vec::new(),
            };
            let (after, found) = before.after_detect(t(now), PERIOD);
            assert_eq!(found, want, "{stored:?} -> {now}");
            assert_eq!(after.heartbeat, Some(t(now)));
            assert_eq!(after.unwatched, want.into_iter().collect::<Vec<_>>());
        }
    }

    /// Unused time counts only watched time: the stretches after the last use are left out,
    /// clipped to the last use and to `now`; a never-used image counts from first detected.
    #[test]
    fn watched_unused_time_leaves_out_the_unwatched_stretches_after_the_last_use() {
        let watch = WatchHistory {
            heartbeat: Some(t(10 * HOUR)),
            unwatched: vec![gap(2 * HOUR, 4 * HOUR), gap(6 * HOUR, 7 * HOUR)],
        };
        let now = t(10 * HOUR);
        let hours = |h: i64| Duration::from_secs((h * HOUR) as u64);
        let cases = [
            (HOUR, hours(9 - 3)),
            (3 * HOUR, hours(7 - 2)),
            (5 * HOUR, hours(5 - 1)),
            (6 * HOUR + 30 * MIN, Duration::from_secs((3 * HOUR) as u64)),
            (8 * HOUR, hours(2)),
        ];
        for (last_used, want) in cases {
            assert_eq!(
                watch.watched_unused(&used_at(last_used), now),
                want,
                "{last_used}"
            );
        }
        let never = ImageRecord {
            first_detected: t(HOUR),
            last_used: UnixNanos::NEVER,
            size: 1,
            pinned: false,
        };
        assert_eq!(watch.watched_unused(&never, now), hours(6));
        // A stretch beyond `now` (the clock went back since) counts nothing past `now`.
        assert_eq!(watch.unwatched_between(t(0), t(3 * HOUR)), hours(1));
    }

    /// Randomized: with the list bounded, merging keeps every unwatched moment unwatched, so
    /// the watched unused time computed is never more than the true one (what every stretch
    /// ever found leaves); the list never exceeds its bound.
    #[test]
    fn the_bounded_list_never_counts_more_watched_time_than_there_was() {
        for seed in 0..40u64 {
            let mut rng = fastrand::Rng::with_seed(seed);
            let mut watch = WatchHistory::default();
            let mut all: Vec<Unwatched> = Vec::new();
            let mut now = HOUR;
            for _ in 0..60 {
                now += if rng.u8(0..3) == 0 {
                    rng.i64(20 * MIN..10 * HOUR)
                } else {
                    rng.i64(MIN..5 * MIN)
                };
                let (next, found) = watch.after_detect(t(now), PERIOD);
                all.extend(found);
                assert!(next.unwatched.len() <= MAX_GAPS, "seed {seed}");
                watch = next;
            }
            let exact = WatchHistory {
                heartbeat: watch.heartbeat,
                unwatched: all,
            };
            for _ in 0..50 {
                let record = used_at(rng.i64(1..now));
                let got = watch.watched_unused(&record, t(now));
                let truth = exact.watched_unused(&record, t(now));
                assert!(got <= truth, "seed {seed}: {got:?} > {truth:?}");
            }
        }
    }

    /// The history round-trips through the meta values a batch writes; without a heartbeat
    /// the stored `last_detect` stands for it.
    #[test]
    fn the_history_round_trips_through_meta() {
        let watch = WatchHistory {
            heartbeat: Some(t(9 * HOUR)),
            unwatched: vec![gap(HOUR, 2 * HOUR), gap(3 * HOUR, 8 * HOUR)],
        };
        let mut batch = Batch::new();
        watch.write(&mut batch);
        assert!(batch.ops().is_empty(), "written as notes, not changes");
        let meta: BTreeMap<String, i64> = batch.notes().iter().cloned().collect();
        assert_eq!(
            WatchHistory::from_meta(|n| meta.get(n).copied()),
            watch.clone()
        );
        let old = BTreeMap::from([(meta_keys::LAST_DETECT.to_owned(), t(HOUR).0)]);
        assert_eq!(
            WatchHistory::from_meta(|n| old.get(n).copied()).heartbeat,
            Some(t(HOUR))
        );
        assert!(
            !batch
                .ops()
                .iter()
                .any(|op| matches!(op, BatchOp::SetMeta { .. }))
        );
    }

    fn image(id: &str) -> RuntimeImage {
        RuntimeImage {
            id: ImageId::new(id),
            size: 10,
            ..RuntimeImage::default()
        }
    }

    /// The case: MaxAge 1h, the image used at the last detect before the agent went
    /// down for 3 hours (its container may have run all that time). The first GC after the
    /// restart keeps it (unused 0s of watched time); it goes once it has been unused for
    /// longer than MaxAge of watched time. Every detect commits (the heartbeat), also one
    /// that changes nothing else.
    #[tokio::test]
    async fn an_image_used_before_a_long_downtime_is_not_removed_at_the_first_cycle() {
        let dir = tempfile::tempdir().expect("tempdir");
        let runtime = ScriptedRuntime::new();
        {
            let mut state = runtime.state();
            state.images = vec![image("sha256:busy"), image("sha256:other")].into();
            state.containers = vec![RuntimeContainer {
                id: "c".into(),
                pod_sandbox_id: "p".into(),
                image: "busy".into(),
                image_id: ImageId::new("sha256:busy"),
                state: ContainerState::Running,
                runtime_handler: String::new(),
            }];
            state.fs = Some((1000, 900));
        }
        let t0 = 100 * HOUR;
        let store = Arc::new(Store::open(&dir.path().join("db.redb"), t(t0)).expect("open"));
        let config = GcConfig {
            policy: GcPolicy {
                max_age: Duration::from_secs(HOUR as u64),
                ..GcPolicy::default()
            },
            ..GcConfig::default()
        };
        let manager = ImageGcManager::new(runtime.clone(), store.clone(), config)
            .expect("new")
            .with_watch_period(PERIOD);
        manager.detect(t(t0)).await.expect("detect");
        let commits = store.commits();
        // Nothing changes at the next detect but the heartbeat: one commit.
        manager.detect(t(t0)).await.expect("detect");
        assert_eq!(store.commits(), commits, "the same time: nothing to write");
        runtime.state().containers.clear();
        // The agent is down from t0 to t0 + 3h; the container ran and went meanwhile.
        let mut now = t0 + 3 * HOUR;
        let report = manager.garbage_collect(t(now)).await;
        assert!(report.error.is_none(), "{:?}", report.error);
        assert!(report.removed.is_empty(), "{:?}", report.removed);
        assert_eq!(
            store.meta(meta_keys::HEARTBEAT).expect("meta"),
            Some(t(now).0)
        );
        let (from, to) = meta_keys::unwatched(0);
        assert_eq!(store.meta(&from).expect("meta"), Some(t(t0).0));
        assert_eq!(store.meta(&to).expect("meta"), Some(t(now).0));
        // Watched for an hour more, a detect every 5 minutes: each commits once.
        for _ in 0..12 {
            now += 5 * MIN;
            let commits = store.commits();
            let report = manager.detect(t(now)).await.expect("detect");
            assert!(report.committed);
            assert_eq!(store.commits(), commits + 1);
        }
        // 1h of watched time: not longer than MaxAge yet.
        let report = manager.garbage_collect(t(now)).await;
        assert!(report.removed.is_empty(), "{:?}", report.removed);
        now += MIN;
        let report = manager.garbage_collect(t(now)).await;
        let removed: Vec<&str> = report
            .removed
            .iter()
            .map(|r| r.key.image_id.as_str())
            .collect();
        // Eviction order: the never-used image (first detected at t0) first.
        assert_eq!(removed, ["sha256:other", "sha256:busy"]);
    }

    /// Stretches found after the clock went back are kept in time order; merging them keeps
    /// every stretch's unwatched time, and the list reads back whole (reviewer's case: a node
    /// that boots at a 1970 clock between two later stretches).
    #[test]
    fn stretches_found_after_the_clock_went_back_merge_without_losing_one() {
        let mut history = WatchHistory {
            heartbeat: Some(t(100 * HOUR)),
            unwatched: vec![],
        };
        let detect = |history: &mut WatchHistory, at: i64| {
            *history = history.after_detect(t(at), PERIOD).0;
        };
        detect(&mut history, 110 * HOUR);
        detect(&mut history, 5 * HOUR);
        detect(&mut history, 7 * HOUR);
        for i in 0..7 {
            detect(&mut history, (200 + 10 * i) * HOUR);
            detect(&mut history, (200 + 10 * i) * HOUR + 10 * MIN);
        }
        let now = t(300 * HOUR);
        assert!(
            history.unwatched_between(t(5 * HOUR), now) >= Duration::from_secs(2 * HOUR as u64),
            "{history:?}"
        );
        let mut batch = Batch::new();
        history.write(&mut batch);
        let written: BTreeMap<String, i64> = batch.notes().iter().cloned().collect();
        let read = WatchHistory::from_meta(|name| written.get(name).copied());
        assert_eq!(read.unwatched.len(), MAX_GAPS, "{read:?}");
        assert_eq!(read, history);
    }

    /// A node down every night: after more stretches than are kept, MaxAge still fires once
    /// the image has been unused for longer than MaxAge of watched time (merged stretches keep
    /// their unwatched length, not their span).
    #[test]
    fn merged_stretches_do_not_keep_an_image_for_good() {
        let day = 24 * HOUR;
        let mut history = WatchHistory {
            heartbeat: Some(t(0)),
            unwatched: vec![],
        };
        for d in 0..20 {
            // 12 h watched, a detect every 10 minutes, then 12 h down.
            let mut at = d * day;
            while at <= d * day + 12 * HOUR {
                history = history.after_detect(t(at), Duration::from_secs(600)).0;
                at += 10 * MIN;
            }
        }
        let now = 20 * day + 11 * HOUR;
        history = history
            .after_detect(t(20 * day), Duration::from_secs(600))
            .0;
        let mut at = 20 * day;
        while at <= now {
            history = history.after_detect(t(at), Duration::from_secs(600)).0;
            at += 10 * MIN;
        }
        assert_eq!(history.unwatched.len(), MAX_GAPS);
        // Used at 1 h: about 20 x 12 h of watched time since.
        let watched = history.watched_unused(&used_at(HOUR), t(now));
        assert!(
            watched > Duration::from_secs(200 * HOUR as u64),
            "{watched:?} of watched time: {history:?}"
        );
        // Never more than the real watched time (about 251 h).
        assert!(
            watched <= Duration::from_secs(252 * HOUR as u64),
            "{watched:?}"
        );
    }
}
