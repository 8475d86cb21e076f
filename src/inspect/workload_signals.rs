//! The signal lines of `inspect workload`: the changes of the cluster's declarations the agent
//! recorded (schema 7's `signals` table, `migrations/0007_signals.md`), written in exactly the
//! shapes the workload trace's parser reads (`cronjob` {`name`, `schedule`, `time_zone`,
//! `suspend`, `images`}, `bound` {`pod`, `images`}, `rollout` {`workload`, `images`,
//! `previous`}; `workload::signals`).
//!
//! Invariants: the lines recorded from `--since` on keep their time and order; of those before
//! it only the last of each key is written, at the trace's start (`at` 0), and only if its key
//! still stood then (a pod gone is not written), so the simulation starts knowing what the
//! cluster declared; the output is a function of the table alone.

use std::collections::BTreeMap;
use std::io::{self, Write};

use serde_json::{Map, Value, json};

use super::{Secs, line};
use crate::model::{RecordedSignal, SignalEntry, SignalKind, UnixNanos};

/// The recorded signals split at the trace's start.
pub(super) struct SignalLines<'a> {
    /// The last line of each key recorded before the start that still stood, in key order.
    pub(super) at_start: Vec<&'a RecordedSignal>,
    /// The lines recorded from the start on, with their times, in the table's order.
    pub(super) timed: Vec<(i64, &'a RecordedSignal)>,
}

/// Splits `signals` (the table, oldest first) at `from`.
pub(super) fn split(signals: &[SignalEntry], from: UnixNanos) -> SignalLines<'_> {
    let mut before: BTreeMap<(SignalKind, &str), &RecordedSignal> = BTreeMap::new();
    let mut timed = Vec::new();
    for entry in signals {
        if entry.at < from {
            before.insert(entry.signal.key(), &entry.signal);
        } else {
            timed.push((entry.at.0, &entry.signal));
        }
    }
    let at_start = before
        .into_values()
        .filter(
            |signal| !matches!(signal, RecordedSignal::Bound { images, .. } if images.is_empty()),
        )
        .collect();
    SignalLines { at_start, timed }
}

/// Writes `signal`'s line at `at`.
pub(super) fn write_signal(w: &mut dyn Write, at: Secs, signal: &RecordedSignal) -> io::Result<()> {
    let (op, body) = match signal {
        RecordedSignal::CronJob {
            name,
            schedule,
            time_zone,
            suspend,
            images,
        } => {
            let mut body = Map::new();
            body.insert("name".to_owned(), json!(name));
            body.insert("schedule".to_owned(), json!(schedule));
            if let Some(zone) = time_zone {
                body.insert("time_zone".to_owned(), json!(zone));
            }
            body.insert("suspend".to_owned(), json!(suspend));
            body.insert("images".to_owned(), json!(images));
            ("cronjob", Value::Object(body))
        }
        RecordedSignal::Bound { pod, images } => ("bound", json!({"pod": pod, "images": images})),
        RecordedSignal::Rollout {
            workload,
            images,
            previous,
        } => (
            "rollout",
            json!({"workload": workload, "images": images, "previous": previous}),
        ),
    };
    let mut object = Map::new();
    object.insert("at".to_owned(), json!(at));
    object.insert(op.to_owned(), body);
    line(w, &Value::Object(object))
}
