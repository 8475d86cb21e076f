//! Printing for `imagekeeper inspect stats`: the database's counts and sizes, the journal's
//! size and re-pull rates, and the last-used histogram, as a table or as JSON / a List. It
//! prints what it is given (computed in `imagekeeper::inspect`) and computes nothing itself;
//! the JSON field names are a public contract (README, output formats page).

use std::io::{self, Write};

use imagekeeper::format::{format_rfc3339, format_size};
use imagekeeper::inspect::{MetaInfo, RepullRate, Stats};
use imagekeeper::model::UnixNanos;
use serde_json::{Value, json};

use super::{json_out, time_json, when};
use crate::cli::output::{Format, KubeList, OutputArgs, is_list, table};

/// The journal's share of `inspect stats`: its size and the re-pull rate of the removals of
/// the last day and the last week.
pub struct JournalStats {
    pub entries: u64,
    pub last_day: RepullRate,
    pub last_week: RepullRate,
}

fn rate_text(r: &RepullRate) -> String {
    if r.removals == 0 {
        return "no removals".to_owned();
    }
    format!(
        "{} of {} removals pulled again ({:.0}%)",
        r.repulled,
        r.removals,
        r.rate * 100.0
    )
}

pub fn stats(
    w: &mut dyn Write,
    out: &OutputArgs,
    s: &Stats,
    meta: &MetaInfo,
    journal: &JournalStats,
    now: UnixNanos,
) -> io::Result<()> {
    if is_list(out.format()) {
        let time = |t: Option<UnixNanos>| t.map(format_rfc3339);
        let histogram: Vec<Value> = s
            .last_used
            .iter()
            .map(|b| json!({"lastUsed": b.label, "images": b.count, "sizeBytes": b.size}))
            .collect();
        let mut list = KubeList::new("RecordStats");
        list.push(
            "records",
            json!({
                "records": s.records,
                "pinned": s.pinned,
                "neverUsed": s.never_used,
                "backoffEntries": s.backoff_entries,
                "totalSizeBytes": s.total_size,
                "lastUsedHistogram": histogram,
                "schemaVersion": meta.schema_version,
                "createdAt": time(meta.created_at),
                "agentStartedAt": time(meta.agent_started_at),
                "lastDetect": time(meta.last_detect),
                "heartbeat": time(meta.heartbeat),
                "journalEntries": journal.entries,
                "repulls": {
                    "lastDay": journal.last_day,
                    "lastWeek": journal.last_week,
                },
            }),
        );
        return list.write(w, out.format());
    }
    if out.format() == Format::Json {
        let (created, created_at) = time_json(meta.created_at);
        let (started, started_at) = time_json(meta.agent_started_at);
        let (detect, detect_at) = time_json(meta.last_detect);
        let (heartbeat, heartbeat_at) = time_json(meta.heartbeat);
        let v = json!({
            "records": s.records,
            "pinned": s.pinned,
            "never_used": s.never_used,
            "backoff_entries": s.backoff_entries,
            "total_size": s.total_size,
            "last_used_histogram": s.last_used,
            "journal_entries": journal.entries,
            "repulls": {
                "last_day": journal.last_day,
                "last_week": journal.last_week,
            },
            "meta": {
                "schema_version": meta.schema_version,
                "created_at_unix_nanos": created,
                "created_at": created_at,
                "agent_started_at_unix_nanos": started,
                "agent_started_at": started_at,
                "last_detect_unix_nanos": detect,
                "last_detect": detect_at,
                "heartbeat_unix_nanos": heartbeat,
                "heartbeat": heartbeat_at,
            },
        });
        return json_out(w, &v);
    }
    let meta_time =
        |t: Option<UnixNanos>| t.map_or_else(|| "(not set)".to_owned(), |t| when(now, t));
    let lines = [
        ("records", s.records.to_string()),
        ("pinned", s.pinned.to_string()),
        ("never used", s.never_used.to_string()),
        ("backoff entries", s.backoff_entries.to_string()),
        (
            "total size",
            format!("{} ({} bytes)", format_size(s.total_size), s.total_size),
        ),
        (
            "schema version",
            meta.schema_version
                .map_or_else(|| "(not set)".to_owned(), |v| v.to_string()),
        ),
        ("created at", meta_time(meta.created_at)),
        ("agent started at", meta_time(meta.agent_started_at)),
        ("last detect", meta_time(meta.last_detect)),
        ("heartbeat", meta_time(meta.heartbeat)),
        ("journal entries", journal.entries.to_string()),
        ("re-pulls 1d", rate_text(&journal.last_day)),
        ("re-pulls 7d", rate_text(&journal.last_week)),
    ];
    for (name, value) in lines {
        writeln!(w, "{:<18}{value}", format!("{name}:"))?;
    }
    writeln!(w)?;
    let rows: Vec<Vec<String>> = s
        .last_used
        .iter()
        .map(|b| vec![b.label.to_owned(), b.count.to_string(), format_size(b.size)])
        .collect();
    table(w, &["LAST USED", "IMAGES", "SIZE"], &rows, out.no_headers)
}
