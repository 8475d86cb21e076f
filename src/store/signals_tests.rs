//! Schema 7's `signals` table: appends keep their order (within one instant too), survive a
//! reopen, are capped at the oldest, refuse what a trace line could not state, and `check`
//! sees a row that does not decode.

use super::super::temp_store;
use super::*;
use crate::model::{MAX_SIGNAL_ENTRIES, RecordedSignal, SignalEntry, SignalKind, UnixNanos};

fn bound(at: i64, pod: &str, images: &[&str]) -> SignalEntry {
    SignalEntry {
        at: UnixNanos::from_secs(at),
        signal: RecordedSignal::Bound {
            pod: pod.to_owned(),
            images: images.iter().map(|s| (*s).to_owned()).collect(),
        },
    }
}

#[test]
fn appended_signals_read_back_in_time_then_append_order_and_survive_a_reopen() {
    let (dir, store) = temp_store();
    let first = [bound(10, "a/one", &["x:1"]), bound(10, "a/two", &["y:1"])];
    store.append_signals(&first).expect("append");
    let commits = store.commits();
    store.append_signals(&[]).expect("append nothing");
    assert_eq!(store.commits(), commits, "an empty append commits nothing");
    // Same instant again (a second append), then an earlier one (the clock moved back).
    let second = [bound(10, "a/one", &[]), bound(5, "a/three", &["z:1"])];
    store.append_signals(&second).expect("append");
    let want = vec![
        second[1].clone(),
        first[0].clone(),
        first[1].clone(),
        second[0].clone(),
    ];
    assert_eq!(store.signals().expect("signals"), want);
    drop(store);
    let mut store =
        Store::open(&dir.path().join("records.redb"), UnixNanos::from_secs(1)).expect("reopen");
    assert_eq!(store.signals().expect("signals"), want);
    assert!(store.check().expect("check").is_empty());
}

#[test]
fn last_signals_gives_each_names_last_line_of_the_kind_in_table_order() {
    let (_dir, store) = temp_store();
    let rollout = SignalEntry {
        at: UnixNanos::from_secs(30),
        signal: RecordedSignal::Rollout {
            workload: "a/one".to_owned(),
            images: vec!["r:1".to_owned()],
            previous: Vec::new(),
        },
    };
    let entries = [
        bound(10, "a/one", &["x:1"]),
        bound(20, "a/one", &["x:2"]),
        bound(20, "a/two", &["y:1"]),
        rollout,
        // Appended last, but earlier in the table (the clock moved back): not the last line.
        bound(15, "a/two", &["y:0"]),
    ];
    store.append_signals(&entries).expect("append");
    let names = |list: &[&str]| list.iter().map(|s| (*s).to_owned()).collect();
    let got = store
        .last_signals(SignalKind::Bound, &names(&["a/one", "a/two", "a/gone"]))
        .expect("last signals");
    assert_eq!(
        got,
        vec![entries[2].signal.clone(), entries[1].signal.clone()]
    );
    let got = store
        .last_signals(SignalKind::Rollout, &names(&["a/one"]))
        .expect("last signals");
    assert_eq!(got, vec![entries[3].signal.clone()]);
    assert!(
        store
            .last_signals(SignalKind::CronJob, &names(&[]))
            .expect("no names")
            .is_empty()
    );
}

#[test]
fn the_oldest_signals_are_dropped_past_the_cap() {
    let (_dir, store) = temp_store();
    let entries: Vec<SignalEntry> = (0..MAX_SIGNAL_ENTRIES as i64 + 3)
        .map(|i| bound(i, "a/p", &["x:1"]))
        .collect();
    store.append_signals(&entries).expect("append");
    let kept = store.signals().expect("signals");
    assert_eq!(kept.len(), MAX_SIGNAL_ENTRIES);
    assert_eq!(kept.first(), entries.get(3), "the three oldest are dropped");
    assert_eq!(kept.last(), entries.last());
}

#[test]
fn a_signal_a_trace_line_could_not_state_is_refused_and_nothing_is_written() {
    let (_dir, store) = temp_store();
    let too_many: Vec<&str> = vec!["x"; 129];
    let cases = [
        bound(1, "", &["x"]),
        bound(1, "a/p", &too_many),
        bound(1, "a/p", &[&"x".repeat(4097)]),
        SignalEntry {
            at: UnixNanos(1),
            signal: RecordedSignal::CronJob {
                name: "a/c".to_owned(),
                schedule: "@daily".to_owned(),
                time_zone: Some(String::new()),
                suspend: false,
                images: vec!["x".to_owned()],
            },
        },
    ];
    for case in cases {
        let batch = [bound(0, "a/fine", &["y"]), case.clone()];
        match store.append_signals(&batch) {
            Err(StoreError::InvalidKey { .. }) => {}
            other => panic!("{case:?}: expected InvalidKey, got {other:?}"),
        }
    }
    assert!(store.signals().expect("signals").is_empty());
}

#[test]
fn check_names_a_signal_row_that_does_not_decode() {
    let (_dir, mut store) = temp_store();
    store
        .append_signals(&[bound(1, "a/p", &["x"])])
        .expect("append");
    let key = SignalKey {
        at: UnixNanos(2),
        seq: 0,
    };
    store.raw_bytes_for_tests("signals", &key.encode(), &[1, 9]);
    let violations = store.check().expect("check");
    assert!(
        violations
            .iter()
            .filter(|v| matches!(
                v,
                Violation::Undecodable {
                    table: "signals",
                    ..
                }
            ))
            .count()
            == 1,
        "{violations:?}"
    );
}
