//! Printing for `imagekeeper inspect`: aligned tables for people, JSON for scripts. Times go
//! out as unix nanoseconds and RFC 3339 UTC in JSON, relative and RFC 3339 in tables. Strings
//! from the file (ids, handlers, backoff keys, errors) are exact in JSON and have their
//! terminal control characters escaped in tables (`escape_control`).

use std::io::{self, Write};

use imagekeeper::gc::explain::{Decision, Explanation, SpacePass};
use imagekeeper::gc::format::{format_ago, format_rfc3339, format_size, go_duration};
use imagekeeper::inspect::{CheckReport, MetaInfo, NamesByKey, RepullRate, Stats, escape_control};
use imagekeeper::model::{BackoffEntry, ImageNames, JournalEntry, UnixNanos};
use imagekeeper::store::{JournalKey, StoredRecord};
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

/// The (IMAGE, TAG) rows `crictl images` prints for an image: one per repo tag, split at the
/// tag's `:` (after the last `/`); with no tag, the repository of its first repo digest (or
/// `<none>`) and `<none>`, as crictl does for an untagged image.
fn repo_tag_rows(names: Option<&ImageNames>) -> Vec<(String, String)> {
    let none = || "<none>".to_owned();
    let Some(names) = names else {
        return vec![(none(), none())];
    };
    if names.repo_tags.is_empty() {
        let repo = names
            .repo_digests
            .first()
            .and_then(|d| d.split_once('@'))
            .map_or_else(none, |(repo, _)| repo.to_owned());
        return vec![(repo, none())];
    }
    names
        .repo_tags
        .iter()
        .map(|tag| {
            let slash = tag.rfind('/').map_or(0, |i| i + 1);
            match tag[slash..].rfind(':') {
                Some(i) => (tag[..slash + i].to_owned(), tag[slash + i + 1..].to_owned()),
                None => (tag.clone(), none()),
            }
        })
        .collect()
}

/// The image's names in JSON: every repo tag and digest (empty lists when none are stored).
fn names_json(obj: &mut serde_json::Map<String, Value>, names: Option<&ImageNames>) {
    let empty = ImageNames::default();
    let names = names.unwrap_or(&empty);
    obj.insert("repo_tags".into(), json!(names.repo_tags));
    obj.insert("repo_digests".into(), json!(names.repo_digests));
}

/// Like `crictl images` (IMAGE, TAG, IMAGE ID, SIZE), one row per repo tag, plus
/// imagekeeper's columns.
pub fn list(
    w: &mut dyn Write,
    out: Output,
    records: &[StoredRecord],
    names: &NamesByKey,
    now: UnixNanos,
) -> io::Result<()> {
    if out == Output::Json {
        let all: Vec<Value> = records
            .iter()
            .map(|r| {
                let mut v = record_json(r, Some(now));
                if let Some(obj) = v.as_object_mut() {
                    names_json(obj, names.get(&r.key));
                }
                v
            })
            .collect();
        return json_out(w, &Value::Array(all));
    }
    let rows: Vec<Vec<String>> = records
        .iter()
        .flat_map(|r| {
            repo_tag_rows(names.get(&r.key))
                .into_iter()
                .map(move |(image, tag)| {
                    vec![
                        image,
                        tag,
                        r.key.image_id.short().to_owned(),
                        format_size(r.record.size),
                        when(now, r.record.first_detected),
                        when(now, r.record.last_used),
                        r.record.pinned.to_string(),
                        handler(&r.key.runtime_handler).to_owned(),
                    ]
                })
        })
        .collect();
    table(
        w,
        &[
            "IMAGE",
            "TAG",
            "IMAGE ID",
            "SIZE",
            "FIRST DETECTED",
            "LAST USED",
            "PINNED",
            "HANDLER",
        ],
        &rows,
    )
}

/// One journal entry in JSON.
fn eviction_json(k: &JournalKey, e: &JournalEntry, names: Option<&ImageNames>) -> Value {
    let last_used = (e.last_used != UnixNanos::NEVER).then_some(e.last_used);
    let mut v = json!({
        "removed_at_unix_nanos": k.removed_at.0,
        "removed_at": format_rfc3339(k.removed_at),
        "id": k.key.image_id.as_str(),
        "short_id": k.key.image_id.short(),
        "runtime_handler": k.key.runtime_handler,
        "size": e.size,
        "first_detected_unix_nanos": e.first_detected.0,
        "first_detected": format_rfc3339(e.first_detected),
        "last_used_unix_nanos": e.last_used.0,
        "last_used": last_used.map(format_rfc3339),
        "remover": e.remover.as_str(),
        "reason": e.reason.map(|r| r.as_str()),
        "rank": e.rank,
        "fs": e.fs.map(|fs| json!({
            "capacity": fs.capacity,
            "used_before": fs.used_before,
            "target_used": fs.target_used,
        })),
        "repulled": e.repulled_at.is_some(),
        "repulled_at_unix_nanos": e.repulled_at.map(|t| t.0),
        "repulled_at": e.repulled_at.map(format_rfc3339),
        "repull_delay_seconds": e.repulled_at.map(|t| t.since(k.removed_at).as_secs()),
    });
    if let Some(obj) = v.as_object_mut() {
        names_json(obj, names);
    }
    v
}

/// A name for people: the first repo tag, else the first repo digest, else `<none>`.
fn display_name(names: Option<&ImageNames>) -> String {
    names
        .and_then(|n| n.repo_tags.first().or(n.repo_digests.first()))
        .cloned()
        .unwrap_or_else(|| "<none>".to_owned())
}

/// The journal's entries as given (newest first), with names and whether each came back.
pub fn evictions(
    w: &mut dyn Write,
    out: Output,
    entries: &[(JournalKey, JournalEntry)],
    names: &NamesByKey,
    now: UnixNanos,
) -> io::Result<()> {
    if out == Output::Json {
        let all: Vec<Value> = entries
            .iter()
            .map(|(k, e)| eviction_json(k, e, names.get(&k.key)))
            .collect();
        return json_out(w, &Value::Array(all));
    }
    let rows: Vec<Vec<String>> = entries
        .iter()
        .map(|(k, e)| {
            let usage = e.fs.filter(|fs| fs.capacity > 0).map_or_else(
                || "-".to_owned(),
                |fs| {
                    format!(
                        "{}% -> {}%",
                        fs.used_before.saturating_mul(100) / fs.capacity,
                        fs.target_used.saturating_mul(100) / fs.capacity
                    )
                },
            );
            vec![
                when(now, k.removed_at),
                display_name(names.get(&k.key)),
                k.key.image_id.short().to_owned(),
                format_size(e.size),
                e.remover.as_str().to_owned(),
                e.reason.map_or("-", |r| r.as_str()).to_owned(),
                e.rank.map_or_else(|| "-".to_owned(), |r| r.to_string()),
                usage,
                e.repulled_at.map_or_else(
                    || "no".to_owned(),
                    |t| format!("after {}", go_duration(t.since(k.removed_at))),
                ),
            ]
        })
        .collect();
    table(
        w,
        &[
            "REMOVED",
            "IMAGE",
            "IMAGE ID",
            "SIZE",
            "BY",
            "REASON",
            "RANK",
            "USAGE",
            "RE-PULLED",
        ],
        &rows,
    )
}

/// What `inspect show` prints of one image: its records (one per runtime handler; none when
/// only the journal still knows it) and its removals, newest first.
pub struct Shown<'a> {
    pub found: &'a [StoredRecord],
    pub all: &'a [StoredRecord],
    pub names: &'a NamesByKey,
    pub removals: &'a [(JournalKey, JournalEntry)],
}

pub fn show(w: &mut dyn Write, out: Output, shown: &Shown<'_>, now: UnixNanos) -> io::Result<()> {
    let Shown {
        found,
        all,
        names,
        removals,
    } = *shown;
    let rank = |r: &StoredRecord| all.iter().position(|a| a.key == r.key).map(|i| i + 1);
    if out == Output::Json {
        let removals_json: Vec<Value> = removals
            .iter()
            .map(|(k, e)| eviction_json(k, e, names.get(&k.key)))
            .collect();
        let mut shown: Vec<Value> = found
            .iter()
            .map(|r| {
                let mut v = record_json(r, Some(now));
                if let Some(obj) = v.as_object_mut() {
                    obj.insert("eviction_rank".into(), json!(rank(r)));
                    obj.insert("records".into(), json!(all.len()));
                    names_json(obj, names.get(&r.key));
                    obj.insert("removals".into(), json!(removals_json));
                }
                v
            })
            .collect();
        if shown.is_empty() {
            // Only the journal knows the image now.
            if let Some((k, _)) = removals.first() {
                let mut v = json!({
                    "id": k.key.image_id.as_str(),
                    "short_id": k.key.image_id.short(),
                    "records": all.len(),
                    "removals": removals_json,
                });
                if let Some(obj) = v.as_object_mut() {
                    names_json(obj, names.get(&k.key));
                }
                shown.push(v);
            }
        }
        return json_out(w, &Value::Array(shown));
    }
    if found.is_empty()
        && let Some((k, _)) = removals.first()
    {
        writeln!(
            w,
            "{:<17}{}",
            "ID:",
            escape_control(k.key.image_id.as_str())
        )?;
        writeln!(w, "{:<17}none (removed)", "RECORD:")?;
        write_names(w, names.get(&k.key))?;
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
        write_names(w, names.get(&r.key))?;
    }
    writeln!(w)?;
    if removals.is_empty() {
        writeln!(w, "REMOVALS:        none in the journal")?;
        return Ok(());
    }
    writeln!(w, "REMOVALS:")?;
    evictions(w, Output::Table, removals, names, now)
}

fn write_names(w: &mut dyn Write, names: Option<&ImageNames>) -> io::Result<()> {
    let empty = ImageNames::default();
    let names = names.unwrap_or(&empty);
    for (label, list) in [
        ("REPO TAGS", &names.repo_tags),
        ("REPO DIGESTS", &names.repo_digests),
    ] {
        let value = if list.is_empty() {
            "<none>".to_owned()
        } else {
            list.join(", ")
        };
        writeln!(w, "{:<17}{}", format!("{label}:"), escape_control(&value))?;
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
    out: Output,
    s: &Stats,
    meta: &MetaInfo,
    journal: &JournalStats,
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
            "journal_entries": journal.entries,
            "repulls": {
                "last_day": journal.last_day,
                "last_week": journal.last_week,
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
                    if let Some(prior) = i.evicted_before {
                        obj.insert(
                            "evicted_before".into(),
                            json!({
                                "removed_at": format_rfc3339(prior.removed_at),
                                "remover": prior.remover.as_str(),
                                "reason": prior.reason.map(|r| r.as_str()),
                                "repulled_at": format_rfc3339(prior.repulled_at),
                            }),
                        );
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
