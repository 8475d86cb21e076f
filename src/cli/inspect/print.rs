//! Printing for `imagekeeper inspect`: aligned tables for people, JSON for scripts, and the
//! Kubernetes-style List (`-o kube-json|yaml|name`) through `cli::output`. Times go out as unix
//! nanoseconds and RFC 3339 UTC in JSON, RFC 3339 UTC in the List, relative and RFC 3339 in
//! tables. Strings from the file (ids, handlers, backoff keys, errors) are exact in JSON and
//! YAML and have their terminal control characters escaped in tables (`escape_control`).
//! Table columns are data ([`list_columns`]): a column is one entry.

use std::io::{self, Write};

use imagekeeper::gc::explain::{Decision, Explanation, ImageExplanation, SpacePass};
use imagekeeper::gc::format::{format_ago, format_rfc3339, format_size, go_duration};
use imagekeeper::inspect::{CheckReport, MetaInfo, Stats, escape_control};
use imagekeeper::model::{BackoffEntry, ImageId, UnixNanos};
use imagekeeper::store::StoredRecord;
use serde_json::{Value, json};

use crate::cli::output::{Column, Format, KubeList, OutputArgs, is_list, table, write_table};

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

/// An image id as a table shows it: short, or whole with `--no-trunc`.
fn shown_id(id: &ImageId, out: &OutputArgs) -> String {
    if out.no_trunc {
        id.to_string()
    } else {
        id.short().to_owned()
    }
}

/// An RFC 3339 UTC time, or null for never.
fn rfc3339_or_null(t: UnixNanos) -> Value {
    if t == UnixNanos::NEVER {
        Value::Null
    } else {
        json!(format_rfc3339(t))
    }
}

/// One record's fields in the Kubernetes-style List.
fn record_item(r: &StoredRecord) -> Value {
    json!({
        "id": r.key.image_id.as_str(),
        "runtimeHandler": r.key.runtime_handler,
        "sizeBytes": r.record.size,
        "pinned": r.record.pinned,
        "firstDetected": format_rfc3339(r.record.first_detected),
        "lastUsed": rfc3339_or_null(r.record.last_used),
    })
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

/// The columns of `inspect list`, in order; `wide` adds the size in bytes.
pub fn list_columns<'a>(out: &'a OutputArgs, now: UnixNanos) -> Vec<Column<'a, StoredRecord>> {
    vec![
        Column::new("IMAGE ID", move |r: &StoredRecord| {
            shown_id(&r.key.image_id, out)
        }),
        Column::new("HANDLER", |r: &StoredRecord| {
            handler(&r.key.runtime_handler).to_owned()
        }),
        Column::new("SIZE", |r: &StoredRecord| format_size(r.record.size)),
        Column::wide("BYTES", |r: &StoredRecord| r.record.size.to_string()),
        Column::new("FIRST DETECTED", move |r: &StoredRecord| {
            when(now, r.record.first_detected)
        }),
        Column::new("LAST USED", move |r: &StoredRecord| {
            when(now, r.record.last_used)
        }),
        Column::new("PINNED", |r: &StoredRecord| r.record.pinned.to_string()),
    ]
}

/// Records as the List of `ImageRecord` items.
fn record_list(records: &[StoredRecord]) -> KubeList {
    let mut list = KubeList::new("ImageRecord");
    for r in records {
        list.push(r.key.image_id.as_str(), record_item(r));
    }
    list
}

pub fn list(
    w: &mut dyn Write,
    out: &OutputArgs,
    records: &[StoredRecord],
    now: UnixNanos,
) -> io::Result<()> {
    match out.format() {
        Format::Json => {
            let all: Vec<Value> = records.iter().map(|r| record_json(r, Some(now))).collect();
            json_out(w, &Value::Array(all))
        }
        f if is_list(f) => record_list(records).write(w, f),
        _ => write_table(w, &list_columns(out, now), records, out.table()),
    }
}

pub fn show(
    w: &mut dyn Write,
    out: &OutputArgs,
    found: &[StoredRecord],
    all: &[StoredRecord],
    now: UnixNanos,
) -> io::Result<()> {
    let rank = |r: &StoredRecord| all.iter().position(|a| a.key == r.key).map(|i| i + 1);
    if is_list(out.format()) {
        let mut list = KubeList::new("ImageRecord");
        for r in found {
            let mut item = record_item(r);
            if let Some(obj) = item.as_object_mut() {
                obj.insert("evictionRank".into(), json!(rank(r)));
                obj.insert("records".into(), json!(all.len()));
            }
            list.push(r.key.image_id.as_str(), item);
        }
        return list.write(w, out.format());
    }
    if out.format() == Format::Json {
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
    out: &OutputArgs,
    entries: &[(String, BackoffEntry)],
    now: UnixNanos,
) -> io::Result<()> {
    if is_list(out.format()) {
        let mut list = KubeList::new("PullBackoff");
        for (key, e) in entries {
            list.push(
                key.as_str(),
                json!({
                    "key": key,
                    "backoff": go_duration(e.backoff),
                    "backoffSeconds": e.backoff.as_secs_f64(),
                    "lastUpdate": format_rfc3339(e.last_update),
                    "lastError": e.last_error,
                }),
            );
        }
        return list.write(w, out.format());
    }
    if out.format() == Format::Json {
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
    let columns = [
        Column::new("KEY", |(key, _): &(String, BackoffEntry)| key.clone()),
        Column::new("BACKOFF", |(_, e): &(String, BackoffEntry)| {
            go_duration(e.backoff)
        }),
        Column::new("LAST UPDATE", move |(_, e): &(String, BackoffEntry)| {
            when(now, e.last_update)
        }),
        Column::new("LAST ERROR", |(_, e): &(String, BackoffEntry)| {
            e.last_error.clone()
        }),
    ];
    write_table(w, &columns, entries, out.table())
}

pub fn stats(
    w: &mut dyn Write,
    out: &OutputArgs,
    s: &Stats,
    meta: &MetaInfo,
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
            }),
        );
        return list.write(w, out.format());
    }
    if out.format() == Format::Json {
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
    table(w, &["LAST USED", "IMAGES", "SIZE"], &rows, out.no_headers)
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

pub fn explain(w: &mut dyn Write, out: &OutputArgs, e: &Explanation) -> io::Result<()> {
    let removed = e.images.iter().filter(|i| i.decision.removes());
    let (count, bytes) = removed.fold((0u64, 0u64), |(n, b), i| {
        (n + 1, b.saturating_add(i.record.size))
    });
    if is_list(out.format()) {
        let mut list = KubeList::new("ImageDecision");
        for i in &e.images {
            let mut item = record_item(&StoredRecord {
                key: i.key.clone(),
                record: i.record,
            });
            if let Some(obj) = item.as_object_mut() {
                obj.insert("rank".into(), json!(i.rank));
                obj.insert("inUse".into(), json!(i.in_use));
                obj.insert("remove".into(), json!(i.decision.removes()));
                obj.insert("decision".into(), json!(decision_str(i.decision)));
                obj.insert("reason".into(), json!(i.reason));
                obj.insert(
                    "kubeletPulledAt".into(),
                    json!(i.kubelet_pulled_at.map(format_rfc3339)),
                );
            }
            list.push(i.key.image_id.as_str(), item);
        }
        return list.write(w, out.format());
    }
    if out.format() == Format::Json {
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
    if !out.no_headers {
        explain_summary(w, e, count, bytes)?;
    }
    let columns = [
        Column::new("RANK", |i: &ImageExplanation| i.rank.to_string()),
        Column::new("IMAGE ID", |i: &ImageExplanation| {
            shown_id(&i.key.image_id, out)
        }),
        Column::new("HANDLER", |i: &ImageExplanation| {
            handler(&i.key.runtime_handler).to_owned()
        }),
        Column::new("SIZE", |i: &ImageExplanation| format_size(i.record.size)),
        Column::wide("BYTES", |i: &ImageExplanation| i.record.size.to_string()),
        Column::wide("FIRST DETECTED", |i: &ImageExplanation| {
            format_ago(e.now, i.record.first_detected)
        }),
        Column::new("LAST USED", |i: &ImageExplanation| {
            format_ago(e.now, i.record.last_used)
        }),
        Column::wide("PINNED", |i: &ImageExplanation| i.record.pinned.to_string()),
        Column::new("REMOVE", |i: &ImageExplanation| {
            match i.decision {
                Decision::RemoveForAge => "yes (age)",
                Decision::RemoveForSpace => "yes (space)",
                _ => "no",
            }
            .to_owned()
        }),
        Column::new("WHY", |i: &ImageExplanation| i.reason.clone()),
    ];
    write_table(w, &columns, &e.images, out.table())
}

/// The lines above `explain`'s table: the policy, the time, what is in use, the space pass.
fn explain_summary(w: &mut dyn Write, e: &Explanation, count: u64, bytes: u64) -> io::Result<()> {
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
    writeln!(w)
}

pub fn check(w: &mut dyn Write, out: &OutputArgs, report: &CheckReport) -> io::Result<()> {
    if is_list(out.format()) {
        let mut list = KubeList::new("Violation");
        for (n, v) in report.violations.iter().enumerate() {
            list.push(
                format!("violation-{}", n + 1),
                json!({"message": v.to_string(), "violation": v}),
            );
        }
        return list.write(w, out.format());
    }
    if out.format() == Format::Json {
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

/// JSON lines, one record each (`table`, `wide` and `json`, as before), or the List.
pub fn export(w: &mut dyn Write, out: &OutputArgs, records: &[StoredRecord]) -> io::Result<()> {
    if is_list(out.format()) {
        return record_list(records).write(w, out.format());
    }
    for r in records {
        let line = serde_json::to_string(&record_json(r, None)).map_err(io::Error::other)?;
        writeln!(w, "{line}")?;
    }
    Ok(())
}
