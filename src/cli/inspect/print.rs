//! Printing for `imagekeeper inspect`: aligned tables for people, JSON for scripts. Times go
//! out as unix nanoseconds and RFC 3339 UTC in JSON, relative and RFC 3339 in tables. Strings
//! from the file (ids, handlers, backoff keys, errors) are exact in JSON and have their
//! terminal control characters escaped in tables (`escape_control`).

use std::io::{self, Write};

use imagekeeper::gc::explain::{Decision, Explanation, SpacePass};
use imagekeeper::gc::format::{format_ago, format_rfc3339, format_size, go_duration};
use imagekeeper::inspect::{CheckReport, MetaInfo, Stats, escape_control};
use imagekeeper::model::{BackoffEntry, UnixNanos};
use imagekeeper::store::StoredRecord;
use serde_json::{Value, json};

use super::Output;

/// Columns separated by three spaces, each as wide as its widest cell; no trailing spaces.
/// Every cell has its control characters escaped.
fn table(w: &mut dyn Write, headers: &[&str], rows: &[Vec<String>]) -> io::Result<()> {
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|row| row.iter().map(|c| escape_control(c).into_owned()).collect())
        .collect();
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in &rows {
        for (i, cell) in row.iter().enumerate() {
            if let Some(width) = widths.get_mut(i) {
                *width = (*width).max(cell.chars().count());
            }
        }
    }
    let line = |cells: Vec<&str>| -> String {
        let mut out = String::new();
        for (i, cell) in cells.iter().enumerate() {
            out.push_str(cell);
            if i + 1 < cells.len() {
                let pad = widths[i].saturating_sub(cell.chars().count()) + 3;
                out.push_str(&" ".repeat(pad));
            }
        }
        out.trim_end().to_owned()
    };
    writeln!(w, "{}", line(headers.to_vec()))?;
    for row in &rows {
        writeln!(w, "{}", line(row.iter().map(String::as_str).collect()))?;
    }
    Ok(())
}

fn json_out(w: &mut dyn Write, value: &Value) -> io::Result<()> {
    let text = serde_json::to_string_pretty(value).map_err(io::Error::other)?;
    writeln!(w, "{text}")
}

fn handler(h: &str) -> &str {
    if h.is_empty() { "-" } else { h }
}

/// `3m ago (2026-01-02T03:04:05Z)`, or `never`.
fn when(now: UnixNanos, t: UnixNanos) -> String {
    if t == UnixNanos::NEVER {
        "never".to_owned()
    } else {
        format!("{} ({})", format_ago(now, t), format_rfc3339(t))
    }
}

fn time_json(t: Option<UnixNanos>) -> (Value, Value) {
    match t {
        Some(t) => (json!(t.0), json!(format_rfc3339(t))),
        None => (Value::Null, Value::Null),
    }
}

/// One record as JSON; `now` adds the relative times.
fn record_json(r: &StoredRecord, now: Option<UnixNanos>) -> Value {
    let rec = &r.record;
    let last_used = (rec.last_used != UnixNanos::NEVER).then_some(rec.last_used);
    let mut v = json!({
        "id": r.key.image_id.as_str(),
        "short_id": r.key.image_id.short(),
        "runtime_handler": r.key.runtime_handler,
        "size": rec.size,
        "pinned": rec.pinned,
        "first_detected_unix_nanos": rec.first_detected.0,
        "first_detected": format_rfc3339(rec.first_detected),
        "last_used_unix_nanos": rec.last_used.0,
        "last_used": last_used.map(format_rfc3339),
    });
    if let (Some(now), Some(obj)) = (now, v.as_object_mut()) {
        obj.insert("size_human".into(), json!(format_size(rec.size)));
        obj.insert(
            "first_detected_ago".into(),
            json!(format_ago(now, rec.first_detected)),
        );
        obj.insert(
            "last_used_ago".into(),
            json!(format_ago(now, rec.last_used)),
        );
    }
    v
}

pub fn list(
    w: &mut dyn Write,
    out: Output,
    records: &[StoredRecord],
    now: UnixNanos,
) -> io::Result<()> {
    if out == Output::Json {
        let all: Vec<Value> = records.iter().map(|r| record_json(r, Some(now))).collect();
        return json_out(w, &Value::Array(all));
    }
    let rows: Vec<Vec<String>> = records
        .iter()
        .map(|r| {
            vec![
                r.key.image_id.short().to_owned(),
                handler(&r.key.runtime_handler).to_owned(),
                format_size(r.record.size),
                when(now, r.record.first_detected),
                when(now, r.record.last_used),
                r.record.pinned.to_string(),
            ]
        })
        .collect();
    table(
        w,
        &[
            "IMAGE ID",
            "HANDLER",
            "SIZE",
            "FIRST DETECTED",
            "LAST USED",
            "PINNED",
        ],
        &rows,
    )
}

pub fn show(
    w: &mut dyn Write,
    out: Output,
    found: &[StoredRecord],
    all: &[StoredRecord],
    now: UnixNanos,
) -> io::Result<()> {
    let rank = |r: &StoredRecord| all.iter().position(|a| a.key == r.key).map(|i| i + 1);
    if out == Output::Json {
        let shown: Vec<Value> = found
            .iter()
            .map(|r| {
                let mut v = record_json(r, Some(now));
                if let Some(obj) = v.as_object_mut() {
                    obj.insert("eviction_rank".into(), json!(rank(r)));
                    obj.insert("records".into(), json!(all.len()));
                }
                v
            })
            .collect();
        return json_out(w, &Value::Array(shown));
    }
    for (i, r) in found.iter().enumerate() {
        if i > 0 {
            writeln!(w)?;
        }
        let rec = &r.record;
        let rank = rank(r).map_or_else(|| "-".to_owned(), |n| n.to_string());
        let rows = [
            ("ID", r.key.image_id.to_string()),
            (
                "RUNTIME HANDLER",
                handler(&r.key.runtime_handler).to_owned(),
            ),
            (
                "SIZE",
                format!("{} ({} bytes)", format_size(rec.size), rec.size),
            ),
            ("FIRST DETECTED", when(now, rec.first_detected)),
            ("LAST USED", when(now, rec.last_used)),
            ("PINNED", rec.pinned.to_string()),
            ("EVICTION RANK", format!("{rank} of {}", all.len())),
        ];
        for (name, value) in rows {
            writeln!(w, "{:<17}{}", format!("{name}:"), escape_control(&value))?;
        }
    }
    Ok(())
}

pub fn backoff(
    w: &mut dyn Write,
    out: Output,
    entries: &[(String, BackoffEntry)],
    now: UnixNanos,
) -> io::Result<()> {
    if out == Output::Json {
        let all: Vec<Value> = entries
            .iter()
            .map(|(key, e)| {
                json!({
                    "key": key,
                    "backoff": go_duration(e.backoff),
                    "backoff_nanos": u64::try_from(e.backoff.as_nanos()).unwrap_or(u64::MAX),
                    "last_update_unix_nanos": e.last_update.0,
                    "last_update": format_rfc3339(e.last_update),
                    "last_error": e.last_error,
                })
            })
            .collect();
        return json_out(w, &Value::Array(all));
    }
    let rows: Vec<Vec<String>> = entries
        .iter()
        .map(|(key, e)| {
            vec![
                key.clone(),
                go_duration(e.backoff),
                when(now, e.last_update),
                e.last_error.clone(),
            ]
        })
        .collect();
    table(w, &["KEY", "BACKOFF", "LAST UPDATE", "LAST ERROR"], &rows)
}

pub fn stats(
    w: &mut dyn Write,
    out: Output,
    s: &Stats,
    meta: &MetaInfo,
    now: UnixNanos,
) -> io::Result<()> {
    if out == Output::Json {
        let (created, created_at) = time_json(meta.created_at);
        let (started, started_at) = time_json(meta.agent_started_at);
        let (detect, detect_at) = time_json(meta.last_detect);
        let v = json!({
            "records": s.records,
            "pinned": s.pinned,
            "never_used": s.never_used,
            "backoff_entries": s.backoff_entries,
            "total_size": s.total_size,
            "last_used_histogram": s.last_used,
            "meta": {
                "schema_version": meta.schema_version,
                "created_at_unix_nanos": created,
                "created_at": created_at,
                "agent_started_at_unix_nanos": started,
                "agent_started_at": started_at,
                "last_detect_unix_nanos": detect,
                "last_detect": detect_at,
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
    table(w, &["LAST USED", "IMAGES", "SIZE"], &rows)
}

fn space_summary(space: SpacePass, e: &Explanation) -> String {
    let p = &e.policy;
    match space {
        SpacePass::NotEvaluated => {
            "not evaluated (give --capacity and --available to evaluate it)".to_owned()
        }
        SpacePass::Disabled => {
            "image GC is disabled (HighThresholdPercent 100 and MaxAge 0)".to_owned()
        }
        SpacePass::InvalidCapacity => "capacity 0: GC would fail".to_owned(),
        SpacePass::BelowHighThreshold {
            usage_percent,
            available_after_age_pass,
        } => format!(
            "usage {usage_percent}% (available {} after the MaxAge pass) is below \
             HighThresholdPercent {}: it does not run",
            format_size(available_after_age_pass),
            p.high_threshold_percent
        ),
        SpacePass::Runs {
            usage_percent,
            amount_to_free,
            freed,
            sufficient,
            ..
        } => format!(
            "usage {usage_percent}% >= HighThresholdPercent {}: free {} ({amount_to_free} \
             bytes) down to LowThresholdPercent {}; the walk frees {}{}",
            p.high_threshold_percent,
            format_size(u64::try_from(amount_to_free).unwrap_or(0)),
            p.low_threshold_percent,
            format_size(freed),
            if sufficient {
                ""
            } else {
                ", not enough: GC would report insufficient free disk space"
            }
        ),
    }
}

fn decision_str(d: Decision) -> &'static str {
    match d {
        Decision::RemoveForAge => "remove_for_age",
        Decision::RemoveForSpace => "remove_for_space",
        Decision::KeepGcDisabled => "keep_gc_disabled",
        Decision::KeepInUse => "keep_in_use",
        Decision::KeepPullInProgress => "keep_pull_in_progress",
        Decision::KeepKubeletPulling => "keep_kubelet_pulling",
        Decision::KeepKubeletJustPulled => "keep_kubelet_just_pulled",
        Decision::KeepPinned => "keep_pinned",
        Decision::KeepUsedTooRecently => "keep_used_too_recently",
        Decision::KeepYoungerThanMinAge => "keep_younger_than_min_age",
        Decision::KeepBeyondAmountToFree => "keep_beyond_amount_to_free",
        Decision::KeepBelowHighThreshold => "keep_below_high_threshold",
        Decision::KeepSpaceNotEvaluated => "keep_space_not_evaluated",
    }
}

pub fn explain(w: &mut dyn Write, out: Output, e: &Explanation) -> io::Result<()> {
    let removed = e.images.iter().filter(|i| i.decision.removes());
    let (count, bytes) = removed.fold((0u64, 0u64), |(n, b), i| {
        (n + 1, b.saturating_add(i.record.size))
    });
    if out == Output::Json {
        let (detect, detect_at) = time_json(e.last_detect);
        let images: Vec<Value> = e
            .images
            .iter()
            .map(|i| {
                let mut v = record_json(
                    &StoredRecord {
                        key: i.key.clone(),
                        record: i.record,
                    },
                    Some(e.now),
                );
                if let Some(obj) = v.as_object_mut() {
                    obj.insert("rank".into(), json!(i.rank));
                    obj.insert("in_use".into(), json!(i.in_use));
                    obj.insert("remove".into(), json!(i.decision.removes()));
                    obj.insert("decision".into(), json!(decision_str(i.decision)));
                    obj.insert("reason".into(), json!(i.reason));
                    if let Some(at) = i.kubelet_pulled_at {
                        obj.insert("kubelet_pulled_at".into(), json!(format_rfc3339(at)));
                    }
                }
                v
            })
            .collect();
        let v = json!({
            "now_unix_nanos": e.now.0,
            "now": format_rfc3339(e.now),
            "policy": {
                "high_threshold_percent": e.policy.high_threshold_percent,
                "low_threshold_percent": e.policy.low_threshold_percent,
                "min_age": go_duration(e.policy.min_age),
                "max_age": go_duration(e.policy.max_age),
            },
            "last_detect_unix_nanos": detect,
            "last_detect": detect_at,
            "freed_for_age": e.freed_for_age,
            "space_pass": e.space,
            "would_remove": {"images": count, "bytes": bytes},
            "images": images,
        });
        return json_out(w, &v);
    }
    let p = &e.policy;
    writeln!(
        w,
        "policy:      HighThresholdPercent {}, LowThresholdPercent {}, MinAge {}, MaxAge {}",
        p.high_threshold_percent,
        p.low_threshold_percent,
        go_duration(p.min_age),
        go_duration(p.max_age)
    )?;
    writeln!(w, "now:         {}", format_rfc3339(e.now))?;
    writeln!(
        w,
        "in use:      {}",
        match e.last_detect {
            Some(t) => format!(
                "the images last used at the last detect, {}",
                when(e.now, t)
            ),
            None => "none known (no detect recorded)".to_owned(),
        }
    )?;
    writeln!(w, "space pass:  {}", space_summary(e.space, e))?;
    writeln!(w, "would remove {count} image(s), {}", format_size(bytes))?;
    writeln!(w)?;
    let rows: Vec<Vec<String>> = e
        .images
        .iter()
        .map(|i| {
            let remove = match i.decision {
                Decision::RemoveForAge => "yes (age)",
                Decision::RemoveForSpace => "yes (space)",
                _ => "no",
            };
            vec![
                i.rank.to_string(),
                i.key.image_id.short().to_owned(),
                handler(&i.key.runtime_handler).to_owned(),
                format_size(i.record.size),
                format_ago(e.now, i.record.last_used),
                remove.to_owned(),
                i.reason.clone(),
            ]
        })
        .collect();
    table(
        w,
        &[
            "RANK",
            "IMAGE ID",
            "HANDLER",
            "SIZE",
            "LAST USED",
            "REMOVE",
            "WHY",
        ],
        &rows,
    )
}

pub fn check(w: &mut dyn Write, out: Output, report: &CheckReport) -> io::Result<()> {
    if out == Output::Json {
        let violations: Vec<Value> = report
            .violations
            .iter()
            .map(|v| json!({"message": v.to_string(), "violation": v}))
            .collect();
        let v = json!({
            "ok": report.violations.is_empty(),
            "needed_recovery": report.needed_recovery,
            "violations": violations,
        });
        return json_out(w, &v);
    }
    if report.violations.is_empty() {
        return writeln!(w, "ok");
    }
    for v in &report.violations {
        writeln!(w, "violation: {}", escape_control(&v.to_string()))?;
    }
    Ok(())
}

/// JSON lines, one record each.
pub fn export(w: &mut dyn Write, records: &[StoredRecord]) -> io::Result<()> {
    for r in records {
        let line = serde_json::to_string(&record_json(r, None)).map_err(io::Error::other)?;
        writeln!(w, "{line}")?;
    }
    Ok(())
}
