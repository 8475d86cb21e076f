//! Printing for `imagekeeper inspect`: aligned tables for people, JSON for scripts, and the
//! Kubernetes-style List (`-o kube-json|yaml|name`) through `cli::output`. Times go out as unix
//! nanoseconds and RFC 3339 UTC in JSON, RFC 3339 UTC in the List, relative and RFC 3339 in
//! tables. Strings from the file (ids, handlers, backoff keys, errors) are exact in JSON and
//! YAML and have their terminal control characters escaped in tables (`escape_control`).
//! Table columns are data ([`list_columns`]): a column is one entry.

use std::io::{self, Write};

use imagekeeper::format::{format_ago, format_rfc3339, format_size, go_duration};
use imagekeeper::inspect::{CheckReport, NamesByKey, escape_control};
use imagekeeper::model::{
    BackoffEntry, ImageId, ImageNames, JournalEntry, PullEntry, PullKey, RemovalReason,
    StoredWarmState, UnixNanos, WarmRow,
};
use imagekeeper::store::{JournalKey, StoredRecord};
use serde_json::{Value, json};

use crate::cli::output::{Column, Format, KubeList, OutputArgs, is_list, write_table};

mod explain;
mod stats;

pub use explain::explain;
pub use stats::{JournalStats, stats};

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

/// The image's names in the Kubernetes-style List (camelCase).
fn names_item(obj: &mut serde_json::Map<String, Value>, names: Option<&ImageNames>) {
    let empty = ImageNames::default();
    let names = names.unwrap_or(&empty);
    obj.insert("repoTags".into(), json!(names.repo_tags));
    obj.insert("repoDigests".into(), json!(names.repo_digests));
}

/// One row of `inspect list`: a record under one of its repo tags (crictl prints an image
/// once per tag).
pub struct ListRow<'a> {
    pub record: &'a StoredRecord,
    pub image: String,
    pub tag: String,
    /// An active `imagekeeper pin` names the image (schema 4).
    pub pinned_by_imagekeeper: bool,
    /// A warm set entry names the image, in this state at the agent's last warm cycle
    /// (schema 5).
    pub warm: Option<StoredWarmState>,
}

/// The columns of `inspect list`, in order: `crictl images`' (IMAGE, TAG, IMAGE ID, SIZE),
/// then imagekeeper's; `wide` adds the size in bytes.
pub fn list_columns<'a>(out: &'a OutputArgs, now: UnixNanos) -> Vec<Column<'a, ListRow<'a>>> {
    vec![
        Column::new("IMAGE", |r: &ListRow<'_>| r.image.clone()),
        Column::new("TAG", |r: &ListRow<'_>| r.tag.clone()),
        Column::new("IMAGE ID", move |r: &ListRow<'_>| {
            shown_id(&r.record.key.image_id, out)
        }),
        Column::new("SIZE", |r: &ListRow<'_>| format_size(r.record.record.size)),
        Column::wide("BYTES", |r: &ListRow<'_>| r.record.record.size.to_string()),
        Column::new("FIRST DETECTED", move |r: &ListRow<'_>| {
            when(now, r.record.record.first_detected)
        }),
        Column::new("LAST USED", move |r: &ListRow<'_>| {
            when(now, r.record.record.last_used)
        }),
        // "true": the runtime or a pin pattern pins it; "imagekeeper": an active
        // `imagekeeper pin` names it.
        Column::new("PINNED", |r: &ListRow<'_>| {
            if r.pinned_by_imagekeeper {
                "imagekeeper".to_owned()
            } else {
                r.record.record.pinned.to_string()
            }
        }),
        Column::new("HANDLER", |r: &ListRow<'_>| {
            handler(&r.record.key.runtime_handler).to_owned()
        }),
        // The warm set entry's state at the agent's last warm cycle, "-" when no entry
        // names the image (schema 5; last, so the columns before it keep their places).
        Column::new("WARM", |r: &ListRow<'_>| {
            r.warm.map_or("-", StoredWarmState::as_str).to_owned()
        }),
    ]
}

/// Records as the List of `ImageRecord` items, with their names when known.
fn record_list(records: &[StoredRecord], names: Option<&NamesByKey>) -> KubeList {
    let mut list = KubeList::new("ImageRecord");
    for r in records {
        let mut item = record_item(r);
        if let (Some(names), Some(obj)) = (names, item.as_object_mut()) {
            names_item(obj, names.get(&r.key));
        }
        list.push(r.key.image_id.as_str(), item);
    }
    list
}

/// Like `crictl images` (IMAGE, TAG, IMAGE ID, SIZE), one row per repo tag, plus
/// imagekeeper's columns.
pub fn list(
    w: &mut dyn Write,
    out: &OutputArgs,
    records: &[StoredRecord],
    names: &NamesByKey,
    protections: &imagekeeper::gc::Protections,
    warm: &[WarmRow],
    now: UnixNanos,
) -> io::Result<()> {
    let by_pin = |r: &StoredRecord| protections.get(&r.key).is_some_and(|p| p.is_pin());
    // The first (highest priority) warm entry that names the record's image.
    let warm_of = |r: &StoredRecord| {
        warm.iter()
            .find(|w| {
                w.image_id == r.key.image_id.as_str() && w.runtime_handler == r.key.runtime_handler
            })
            .map(|w| w.state)
    };
    match out.format() {
        Format::Json => {
            let all: Vec<Value> = records
                .iter()
                .map(|r| {
                    let mut v = record_json(r, Some(now));
                    if let Some(obj) = v.as_object_mut() {
                        names_json(obj, names.get(&r.key));
                        obj.insert("pinned_by_imagekeeper".to_owned(), Value::Bool(by_pin(r)));
                        obj.insert("warm".to_owned(), Value::Bool(warm_of(r).is_some()));
                        obj.insert(
                            "warm_state".to_owned(),
                            warm_of(r).map_or(Value::Null, |s| Value::from(s.as_str())),
                        );
                    }
                    v
                })
                .collect();
            json_out(w, &Value::Array(all))
        }
        f if is_list(f) => record_list(records, Some(names)).write(w, f),
        _ => {
            let rows: Vec<ListRow<'_>> = records
                .iter()
                .flat_map(|record| {
                    repo_tag_rows(names.get(&record.key))
                        .into_iter()
                        .map(move |(image, tag)| ListRow {
                            record,
                            image,
                            tag,
                            pinned_by_imagekeeper: by_pin(record),
                            warm: warm_of(record),
                        })
                })
                .collect();
            write_table(w, &list_columns(out, now), &rows, out.table())
        }
    }
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

/// One journal entry in the Kubernetes-style List (camelCase, RFC 3339 UTC, bytes).
fn eviction_item(k: &JournalKey, e: &JournalEntry, names: Option<&ImageNames>) -> Value {
    let mut v = json!({
        "removedAt": format_rfc3339(k.removed_at),
        "id": k.key.image_id.as_str(),
        "runtimeHandler": k.key.runtime_handler,
        "sizeBytes": e.size,
        "firstDetected": format_rfc3339(e.first_detected),
        "lastUsed": rfc3339_or_null(e.last_used),
        "remover": e.remover.as_str(),
        "reason": e.reason.map(|r| r.as_str()),
        "rank": e.rank,
        "fs": e.fs.map(|fs| json!({
            "capacityBytes": fs.capacity,
            "usedBeforeBytes": fs.used_before,
            "targetUsedBytes": fs.target_used,
        })),
        "repulled": e.repulled_at.is_some(),
        "repulledAt": e.repulled_at.map(format_rfc3339),
        "repullDelaySeconds": e.repulled_at.map(|t| t.since(k.removed_at).as_secs()),
    });
    if let Some(obj) = v.as_object_mut() {
        names_item(obj, names);
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
    out: &OutputArgs,
    entries: &[(JournalKey, JournalEntry)],
    names: &NamesByKey,
    now: UnixNanos,
) -> io::Result<()> {
    match out.format() {
        Format::Json => {
            let all: Vec<Value> = entries
                .iter()
                .map(|(k, e)| eviction_json(k, e, names.get(&k.key)))
                .collect();
            json_out(w, &Value::Array(all))
        }
        f if is_list(f) => {
            let mut list = KubeList::new("ImageEviction");
            for (k, e) in entries {
                list.push(
                    format!("{}@{}", k.key.image_id.as_str(), k.removed_at.0),
                    eviction_item(k, e, names.get(&k.key)),
                );
            }
            list.write(w, f)
        }
        _ => eviction_table(w, out, entries, names, now),
    }
}

type Eviction = (JournalKey, JournalEntry);

fn eviction_table(
    w: &mut dyn Write,
    out: &OutputArgs,
    entries: &[Eviction],
    names: &NamesByKey,
    now: UnixNanos,
) -> io::Result<()> {
    let columns = [
        Column::new("REMOVED", move |(k, _): &Eviction| when(now, k.removed_at)),
        // A containerd leftover `prune --orphans` removed has no image: its key names it.
        Column::new("IMAGE", |(k, e): &Eviction| {
            if e.reason == Some(RemovalReason::Orphan) {
                k.key.image_id.to_string()
            } else {
                display_name(names.get(&k.key))
            }
        }),
        Column::new("IMAGE ID", |(k, e): &Eviction| {
            if e.reason == Some(RemovalReason::Orphan) {
                "-".to_owned()
            } else {
                shown_id(&k.key.image_id, out)
            }
        }),
        Column::new("SIZE", |(_, e): &Eviction| format_size(e.size)),
        Column::wide("BYTES", |(_, e): &Eviction| e.size.to_string()),
        Column::new("BY", |(_, e): &Eviction| e.remover.as_str().to_owned()),
        Column::new("REASON", |(_, e): &Eviction| {
            e.reason.map_or("-", |r| r.as_str()).to_owned()
        }),
        Column::new("RANK", |(_, e): &Eviction| {
            e.rank.map_or_else(|| "-".to_owned(), |r| r.to_string())
        }),
        Column::new("USAGE", |(_, e): &Eviction| {
            e.fs.filter(|fs| fs.capacity > 0).map_or_else(
                || "-".to_owned(),
                |fs| {
                    format!(
                        "{}% -> {}%",
                        fs.used_before.saturating_mul(100) / fs.capacity,
                        fs.target_used.saturating_mul(100) / fs.capacity
                    )
                },
            )
        }),
        Column::new("RE-PULLED", |(k, e): &Eviction| {
            e.repulled_at.map_or_else(
                || "no".to_owned(),
                |t| format!("after {}", go_duration(t.since(k.removed_at))),
            )
        }),
    ];
    write_table(w, &columns, entries, out.table())
}

/// What `inspect show` prints of one image: its records (one per runtime handler; none when
/// only the journal still knows it) and its removals, newest first.
pub struct Shown<'a> {
    pub found: &'a [StoredRecord],
    pub all: &'a [StoredRecord],
    pub names: &'a NamesByKey,
    pub removals: &'a [(JournalKey, JournalEntry)],
}

pub fn show(
    w: &mut dyn Write,
    out: &OutputArgs,
    shown: &Shown<'_>,
    now: UnixNanos,
) -> io::Result<()> {
    let Shown {
        found,
        all,
        names,
        removals,
    } = *shown;
    let rank = |r: &StoredRecord| all.iter().position(|a| a.key == r.key).map(|i| i + 1);
    if is_list(out.format()) {
        let removal_items: Vec<Value> = removals
            .iter()
            .map(|(k, e)| eviction_item(k, e, names.get(&k.key)))
            .collect();
        let mut list = KubeList::new("ImageRecord");
        for r in found {
            let mut item = record_item(r);
            if let Some(obj) = item.as_object_mut() {
                obj.insert("evictionRank".into(), json!(rank(r)));
                obj.insert("records".into(), json!(all.len()));
                names_item(obj, names.get(&r.key));
                obj.insert("removals".into(), json!(removal_items));
            }
            list.push(r.key.image_id.as_str(), item);
        }
        if found.is_empty() {
            // Only the journal knows the image now.
            if let Some((k, _)) = removals.first() {
                let mut item = json!({
                    "id": k.key.image_id.as_str(),
                    "records": all.len(),
                    "removals": removal_items,
                });
                if let Some(obj) = item.as_object_mut() {
                    names_item(obj, names.get(&k.key));
                }
                list.push(k.key.image_id.as_str(), item);
            }
        }
        return list.write(w, out.format());
    }
    if out.format() == Format::Json {
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
    eviction_table(w, out, removals, names, now)
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

/// One pull in JSON.
fn pull_json(k: &PullKey, e: &PullEntry, names: Option<&ImageNames>) -> Value {
    let mut v = json!({
        "at_unix_nanos": k.at.0,
        "at": format_rfc3339(k.at),
        "id": k.key.image_id.as_str(),
        "short_id": k.key.image_id.short(),
        "runtime_handler": k.key.runtime_handler,
        "origin": e.origin.as_str(),
        "name": e.name,
        "size": e.size,
        "took_nanos": u64::try_from(e.took.as_nanos()).unwrap_or(u64::MAX),
    });
    if let Some(obj) = v.as_object_mut() {
        names_json(obj, names);
    }
    v
}

/// The pull history, newest first: `inspect pulls`.
pub fn pulls(
    w: &mut dyn Write,
    out: &OutputArgs,
    pulls: &[(PullKey, PullEntry)],
    names: &NamesByKey,
    now: UnixNanos,
) -> io::Result<()> {
    if is_list(out.format()) {
        let mut list = KubeList::new("ImagePull");
        for (k, e) in pulls {
            let mut item = json!({
                "at": format_rfc3339(k.at),
                "imageId": k.key.image_id.as_str(),
                "runtimeHandler": k.key.runtime_handler,
                "origin": e.origin.as_str(),
                "name": e.name,
                "size": e.size,
                "took": go_duration(e.took),
            });
            if let Some(obj) = item.as_object_mut() {
                names_item(obj, names.get(&k.key));
            }
            list.push(
                format!("{}@{}", k.key.image_id.as_str(), format_rfc3339(k.at)).as_str(),
                item,
            );
        }
        return list.write(w, out.format());
    }
    if out.format() == Format::Json {
        let all: Vec<Value> = pulls
            .iter()
            .map(|(k, e)| pull_json(k, e, names.get(&k.key)))
            .collect();
        return json_out(w, &Value::Array(all));
    }
    type Pull = (PullKey, PullEntry);
    let columns = [
        Column::new("PULLED", move |(k, _): &Pull| when(now, k.at)),
        Column::new("ORIGIN", |(_, e): &Pull| e.origin.as_str().to_owned()),
        Column::new("IMAGE", |(k, e): &Pull| {
            if e.name.is_empty() {
                display_name(names.get(&k.key))
            } else {
                e.name.clone()
            }
        }),
        Column::new("IMAGE ID", move |(k, _): &Pull| {
            shown_id(&k.key.image_id, out)
        }),
        Column::new("SIZE", |(_, e): &Pull| format_size(e.size)),
        Column::wide("BYTES", |(_, e): &Pull| e.size.to_string()),
        Column::new("TOOK", |(_, e): &Pull| {
            if e.took.is_zero() {
                "-".to_owned()
            } else {
                go_duration(e.took)
            }
        }),
        Column::new("HANDLER", |(k, _): &Pull| {
            handler(&k.key.runtime_handler).to_owned()
        }),
    ];
    write_table(w, &columns, pulls, out.table())
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
        return record_list(records, None).write(w, out.format());
    }
    for r in records {
        let line = serde_json::to_string(&record_json(r, None)).map_err(io::Error::other)?;
        writeln!(w, "{line}")?;
    }
    Ok(())
}
