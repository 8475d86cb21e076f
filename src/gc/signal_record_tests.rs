//! The record of the signals' changes, step by step: a table of what the watches hold at each
//! detect and the lines that detect writes (added, changed, gone, unchanged: nothing), with
//! restarts that rebuild the record from what was written (nothing written again).

use super::*;
use crate::gc::{CronSchedule, CronZone};

fn images(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

fn cron(schedule: &str, zone: Option<&str>, suspend: bool, list: &[&str]) -> CronJobSignal {
    CronJobSignal {
        schedule: CronSchedule::parse(schedule).expect("schedule"),
        zone: zone.map_or_else(CronZone::utc, |z| CronZone::named(z).expect("zone")),
        suspend,
        images: images(list),
        here: false,
    }
}

fn revisions(current: &[&str], previous: &[&str]) -> Revisions {
    Revisions {
        current: images(current),
        previous: images(previous),
        superseded: Vec::new(),
    }
}

fn bound(pod: &str, list: &[&str]) -> RecordedSignal {
    RecordedSignal::Bound {
        pod: pod.to_owned(),
        images: images(list),
    }
}

fn cronjob(
    name: &str,
    schedule: &str,
    zone: Option<&str>,
    suspend: bool,
    list: &[&str],
) -> RecordedSignal {
    RecordedSignal::CronJob {
        name: name.to_owned(),
        schedule: schedule.to_owned(),
        time_zone: zone.map(str::to_owned),
        suspend,
        images: images(list),
    }
}

fn rollout(workload: &str, current: &[&str], previous: &[&str]) -> RecordedSignal {
    RecordedSignal::Rollout {
        workload: workload.to_owned(),
        images: images(current),
        previous: images(previous),
    }
}

/// What the watches hold: `None` for a kind not listed yet.
fn now(
    pods: Option<&[(&str, &[&str])]>,
    cronjobs: Option<Vec<(&str, CronJobSignal)>>,
    workloads: Option<Vec<(&str, Revisions)>>,
) -> SignalsNow {
    SignalsNow {
        pods: pods.map(|p| {
            p.iter()
                .map(|(pod, list)| ((*pod).to_owned(), images(list)))
                .collect()
        }),
        cronjobs: cronjobs.map(|c| c.into_iter().map(|(n, j)| (n.to_owned(), j)).collect()),
        workloads: workloads.map(|w| w.into_iter().map(|(n, r)| (n.to_owned(), r)).collect()),
    }
}

/// One detect: whether the agent restarted before it, what the watches hold, what it writes.
struct Step {
    case: &'static str,
    restart: bool,
    now: SignalsNow,
    want: Vec<RecordedSignal>,
}

fn nightly() -> CronJobSignal {
    cron("0 2 * * *", None, false, &["reg/etl:1"])
}

fn web() -> Revisions {
    revisions(&["reg/web:2"], &["reg/web:1"])
}

/// The first steps: nothing listed, then added, unchanged, a restart.
fn steps_added_and_unchanged() -> Vec<Step> {
    vec![
        Step {
            case: "nothing listed yet: nothing written",
            restart: false,
            now: now(None, None, None),
            want: vec![],
        },
        Step {
            case: "added: each key's first line (images sorted, repeats and empty names left out)",
            restart: false,
            now: now(
                Some(&[("ci/build", &["reg/b:1", "reg/a:1", "reg/a:1", ""])]),
                Some(vec![
                    ("batch/nightly", nightly()),
                    (
                        "batch/paris",
                        cron("@weekly", Some("Europe/Paris"), false, &["reg/r:3"]),
                    ),
                    ("batch/empty", cron("@daily", None, false, &[])),
                ]),
                Some(vec![
                    ("shop/web", web()),
                    ("shop/none", revisions(&[], &["x"])),
                ]),
            ),
            want: vec![
                cronjob("batch/nightly", "0 2 * * *", None, false, &["reg/etl:1"]),
                cronjob(
                    "batch/paris",
                    "0 0 * * 0",
                    Some("Europe/Paris"),
                    false,
                    &["reg/r:3"],
                ),
                bound("ci/build", &["reg/a:1", "reg/b:1"]),
                rollout("shop/web", &["reg/web:2"], &["reg/web:1"]),
            ],
        },
        Step {
            case: "unchanged: nothing written",
            restart: false,
            now: now(
                Some(&[("ci/build", &["reg/a:1", "reg/b:1"])]),
                Some(vec![
                    ("batch/nightly", nightly()),
                    (
                        "batch/paris",
                        cron("@weekly", Some("Europe/Paris"), false, &["reg/r:3"]),
                    ),
                ]),
                Some(vec![("shop/web", web())]),
            ),
            want: vec![],
        },
        Step {
            case: "a restart rebuilds the record from what was written: nothing again",
            restart: true,
            now: now(
                Some(&[("ci/build", &["reg/a:1", "reg/b:1"])]),
                Some(vec![
                    ("batch/nightly", nightly()),
                    (
                        "batch/paris",
                        cron("@weekly", Some("Europe/Paris"), false, &["reg/r:3"]),
                    ),
                ]),
                Some(vec![("shop/web", web())]),
            ),
            want: vec![],
        },
    ]
}

/// The later steps: changed, gone, a restart, back.
fn steps_changed_and_gone() -> Vec<Step> {
    vec![
        Step {
            case: "changed: a pod's images, a CronJob suspended, a rollout; a kind not listed is not compared",
            restart: false,
            now: now(
                Some(&[("ci/build", &["reg/a:2"])]),
                Some(vec![
                    (
                        "batch/nightly",
                        cron("0 2 * * *", None, true, &["reg/etl:1"]),
                    ),
                    (
                        "batch/paris",
                        cron("@weekly", Some("Europe/Paris"), false, &["reg/r:3"]),
                    ),
                ]),
                None,
            ),
            want: vec![
                cronjob("batch/nightly", "0 2 * * *", None, true, &["reg/etl:1"]),
                bound("ci/build", &["reg/a:2"]),
            ],
        },
        Step {
            case: "gone: the pod with no images, the CronJob suspended; a removed workload writes nothing",
            restart: false,
            now: now(
                Some(&[]),
                Some(vec![]),
                Some(vec![(
                    "shop/web",
                    revisions(&["reg/web:3"], &["reg/web:2"]),
                )]),
            ),
            want: vec![
                rollout("shop/web", &["reg/web:3"], &["reg/web:2"]),
                cronjob(
                    "batch/paris",
                    "0 0 * * 0",
                    Some("Europe/Paris"),
                    false,
                    &["reg/r:3"],
                )
                .suspended(),
                bound("ci/build", &[]),
            ],
        },
        Step {
            case: "gone stays gone, across a restart too",
            restart: true,
            now: now(Some(&[]), Some(vec![]), Some(vec![])),
            want: vec![],
        },
        Step {
            case: "back: written again",
            restart: false,
            now: now(
                Some(&[("ci/build", &["reg/a:2"])]),
                Some(vec![("batch/nightly", nightly())]),
                Some(vec![("shop/web", web())]),
            ),
            want: vec![
                cronjob("batch/nightly", "0 2 * * *", None, false, &["reg/etl:1"]),
                bound("ci/build", &["reg/a:2"]),
                rollout("shop/web", &["reg/web:2"], &["reg/web:1"]),
            ],
        },
    ]
}

#[test]
fn only_the_changes_are_recorded_and_a_restart_records_nothing_again() {
    let mut steps = steps_added_and_unchanged();
    steps.extend(steps_changed_and_gone());
    let mut table: Vec<SignalEntry> = Vec::new();
    let mut record = SignalRecord::default();
    for (i, step) in steps.into_iter().enumerate() {
        if step.restart {
            record = SignalRecord::from_entries(&table);
        }
        let at = UnixNanos::from_secs(100 + i as i64);
        let gone = gone_lines(&record, &step.now, &table);
        let written = record.changes(&step.now, at, &gone);
        let got: Vec<RecordedSignal> = written.iter().map(|e| e.signal.clone()).collect();
        assert_eq!(got, step.want, "{}", step.case);
        assert!(written.iter().all(|e| e.at == at), "{}", step.case);
        assert!(
            written.iter().all(|e| e.signal.invalid().is_none()),
            "{}",
            step.case
        );
        record.recorded(&step.now, &written);
        table.extend(written);
    }
}

/// The last line in `table` of each CronJob `record` says is gone, newest first, as
/// `Store::last_signals` reads them from the store's table.
fn gone_lines(
    record: &SignalRecord,
    now: &SignalsNow,
    table: &[SignalEntry],
) -> Vec<RecordedSignal> {
    let mut gone = record.cronjobs_gone(now);
    table
        .iter()
        .rev()
        .filter(|e| e.signal.key().0 == SignalKind::CronJob && gone.remove(e.signal.key().1))
        .map(|e| e.signal.clone())
        .collect()
}

/// A change not stored (the append failed) is found again at the next detect.
#[test]
fn a_change_not_recorded_is_written_at_the_next_detect() {
    let record = SignalRecord::default();
    let watches = now(Some(&[("a/p", &["x:1"])]), None, None);
    let first = record.changes(&watches, UnixNanos(1), &[]);
    assert_eq!(first.len(), 1);
    let again = record.changes(&watches, UnixNanos(2), &[]);
    assert_eq!(again.len(), 1, "not taken in: still a change");
    let mut record = record;
    record.recorded(&watches, &again);
    assert!(record.changes(&watches, UnixNanos(3), &[]).is_empty());
}

/// A removed CronJob is named for a read of its last line, written again suspended from that
/// line, and writes nothing when the table no longer holds one; a CronJob recorded suspended
/// is not named.
#[test]
fn a_removed_cronjob_is_written_suspended_from_the_tables_last_line() {
    let listed = now(
        None,
        Some(vec![
            ("batch/nightly", nightly()),
            ("batch/paused", cron("@daily", None, true, &["reg/p:1"])),
        ]),
        None,
    );
    let mut record = SignalRecord::default();
    let written = record.changes(&listed, UnixNanos(1), &[]);
    record.recorded(&listed, &written);
    let removed = now(None, Some(vec![]), None);
    let gone = record.cronjobs_gone(&removed);
    assert_eq!(gone, BTreeSet::from(["batch/nightly".to_owned()]));
    let last = cronjob("batch/nightly", "0 2 * * *", None, false, &["reg/etl:1"]);
    let with_line = record.changes(&removed, UnixNanos(2), std::slice::from_ref(&last));
    assert_eq!(
        with_line.into_iter().map(|e| e.signal).collect::<Vec<_>>(),
        vec![last.suspended()]
    );
    assert!(
        record.changes(&removed, UnixNanos(2), &[]).is_empty(),
        "no line in the table: nothing to state"
    );
    record.recorded(&removed, &[]);
    assert!(record.cronjobs_gone(&removed).is_empty(), "forgotten");
}

impl RecordedSignal {
    fn suspended(self) -> RecordedSignal {
        match self {
            RecordedSignal::CronJob {
                name,
                schedule,
                time_zone,
                images,
                ..
            } => RecordedSignal::CronJob {
                name,
                schedule,
                time_zone,
                suspend: true,
                images,
            },
            other => other,
        }
    }
}
