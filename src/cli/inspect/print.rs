//! Printing for `imagekeeper inspect`: aligned tables for people, JSON for scripts, and the
//! Kubernetes-style List (`-o kube-json|yaml|name`) through `cli::output`. Times go out as unix
//! nanoseconds and RFC 3339 UTC in JSON, RFC 3339 UTC in the List, relative and RFC 3339 in
//! tables. Strings from the file (ids, handlers, backoff keys, errors) are exact in JSON and
//! YAML and have their terminal control characters escaped in tables (`escape_control`).
//! Table columns are data ([`list_columns`]): a column is one entry.

use std::io::{self, Write};

use imagekeeper::format::{format_ago, format_rfc3339, format_size, go_duration};
use imagekeeper::gc::{Decision, Explanation, ImageExplanation, SpacePass};
use imagekeeper::inspect::{CheckReport, MetaInfo, NamesByKey, RepullRate, Stats, escape_control};
use imagekeeper::model::{
    BackoffEntry, ImageId, ImageNames, JournalEntry, PullEntry, PullKey, StoredWarmState,
    UnixNanos, WarmRow,
};
use imagekeeper::store::{JournalKey, StoredRecord};
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
        Column::new("IMAGE", |(k, _): &Eviction| display_name(names.get(&k.key))),
        Column::new("IMAGE ID", |(k, _): &Eviction| {
            shown_id(&k.key.image_id, out)
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
        SpacePass::Off => {
            "off (HighThresholdPercent 100 and MaxAge 0); the inode and budget rules run".to_owned()
        }
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
        // SpacePass is non_exhaustive: a pass this printer does not know yet.
        other => format!("{other:?}"),
    }
}

pub fn explain(w: &mut dyn Write, out: &OutputArgs, e: &Explanation) -> io::Result<()> {
    let removed = e.images.iter().filter(|i| i.decision.removes());
    let (count, bytes) = removed.fold((0u64, 0u64), |(n, b), i| {
        (n + 1, b.saturating_add(i.record.size))
    });
    if is_list(out.format()) {
        return explain_list(w, out.format(), e);
    }
    if out.format() == Format::Json {
        return explain_json(w, e, count, bytes);
    }
    if !out.no_headers {
        explain_summary(w, e, count, bytes)?;
    }
    explain_table(w, out, e)
}

/// `inspect explain -o kube-json|yaml|name`: one `ImageDecision` item per image.
fn explain_list(w: &mut dyn Write, format: Format, e: &Explanation) -> io::Result<()> {
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
            obj.insert("decision".into(), json!(i.decision.as_str()));
            obj.insert("reason".into(), json!(i.reason));
            if let Some(pin) = &i.runtime_pin {
                obj.insert("keep".into(), json!(pin.keep));
                obj.insert("runtimePinned".into(), json!(pin.runtime_pinned));
                obj.insert("runtimePinNote".into(), json!(pin.runtime_pin_note));
            }
            obj.insert(
                "kubeletPulledAt".into(),
                json!(i.kubelet_pulled_at.map(format_rfc3339)),
            );
            obj.insert(
                "evictedBefore".into(),
                json!(i.evicted_before.map(|prior| json!({
                    "removedAt": format_rfc3339(prior.removed_at),
                    "remover": prior.remover.as_str(),
                    "reason": prior.reason.map(|r| r.as_str()),
                    "repulledAt": format_rfc3339(prior.repulled_at),
                }))),
            );
        }
        list.push(i.key.image_id.as_str(), item);
    }
    list.write(w, format)
}

/// `inspect explain --json` / `-o json`: the summary and one object per image.
fn explain_json(w: &mut dyn Write, e: &Explanation, count: u64, bytes: u64) -> io::Result<()> {
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
                obj.insert("decision".into(), json!(i.decision.as_str()));
                obj.insert("reason".into(), json!(i.reason));
                if let Some(at) = i.kubelet_pulled_at {
                    obj.insert("kubelet_pulled_at".into(), json!(format_rfc3339(at)));
                }
                // A kept image: whether the runtime carries it (issue 36; an extension).
                if let Some(pin) = &i.runtime_pin {
                    obj.insert("keep".into(), json!(pin.keep));
                    obj.insert("runtime_pinned".into(), json!(pin.runtime_pinned));
                    obj.insert("runtime_pin_note".into(), json!(pin.runtime_pin_note));
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
                // Under `--image-gc-policy predictive` (issue 39; an extension).
                if let Some(p) = &i.predictive {
                    obj.insert(
                        "predictive".into(),
                        json!({
                            "next_use_in_s": p.estimate.next_use_in_s,
                            "idle_s": p.estimate.idle_s,
                            "basis": p.estimate.basis,
                        }),
                    );
                }
            }
            v
        })
        .collect();
    let mut v = json!({
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
    // Issue 28's passes, present only when they apply (an extension of the contract).
    if let Some(obj) = v.as_object_mut() {
        if let Some(fs) = &e.filesystem {
            obj.insert("filesystem".into(), json!(fs));
        }
        if let Some(budget) = e.budget {
            obj.insert("budget".into(), json!(budget));
        }
        if let Some(inodes) = e.inodes {
            obj.insert("inodes".into(), json!(inodes));
        }
    }
    // Present only when there are some (an extension of the contract, not a change).
    if let (false, Some(obj)) = (e.stale_kubelet_intents.is_empty(), v.as_object_mut()) {
        obj.insert(
            "stale_kubelet_intents".into(),
            json!(
                e.stale_kubelet_intents
                    .iter()
                    .map(|s| json!({
                        "image": s.image,
                        "file": s.file.display().to_string(),
                        "written": format_rfc3339(s.written),
                        "age_seconds": s.age_seconds,
                        "max_age_seconds": s.max_age_seconds,
                    }))
                    .collect::<Vec<_>>()
            ),
        );
    }
    json_out(w, &v)
}

/// `explain -o wide`'s RUNTIME PINNED, as `pins -o wide` says it: yes or no for a kept image
/// the running agent reconciled, else why it is not known; `-` for an image not kept.
fn runtime_pinned_text(i: &ImageExplanation) -> String {
    match &i.runtime_pin {
        None => "-".to_owned(),
        Some(pin) => match pin.runtime_pinned {
            Some(true) => "yes".to_owned(),
            Some(false) => "no".to_owned(),
            None => pin.runtime_pin_note.clone(),
        },
    }
}

/// `inspect explain` as a table (`-o table|wide`).
fn explain_table(w: &mut dyn Write, out: &OutputArgs, e: &Explanation) -> io::Result<()> {
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
        Column::wide("RUNTIME PINNED", runtime_pinned_text),
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
    if let Some(fs) = &e.filesystem {
        writeln!(w, "filesystem:  {}", escape_control(fs))?;
    }
    for other in &e.other_filesystems {
        writeln!(
            w,
            "filesystem:  {} (a further image filesystem): {}{}",
            escape_control(&other.mountpoint),
            other
                .usage_percent
                .map_or_else(String::new, |u| format!("{u}% used; ")),
            match (&other.same_filesystem_as, other.runs()) {
                (Some(first), _) => format!(
                    "the same filesystem as {}: skipped (judged there)",
                    escape_control(first)
                ),
                (None, true) => "over a high threshold: a measured pass removes \
                                 other_fs_candidate images in order until it is at or below \
                                 the low thresholds"
                    .to_owned(),
                (None, false) => "below the high thresholds: no pass".to_owned(),
            }
        )?;
    }
    writeln!(w, "space pass:  {}", space_summary(e.space, e))?;
    if let Some(b) = e.budget {
        writeln!(
            w,
            "budget:      images use {} against a budget of {} (down to {}){}",
            format_size(b.need.total),
            format_size(b.need.high),
            format_size(b.need.low),
            match b.need.amount_to_free {
                None => ": within it".to_owned(),
                Some(amount) => format!(
                    ": free {}; the walk frees {}{}",
                    format_size(u64::try_from(amount).unwrap_or(0)),
                    format_size(b.freed),
                    if b.sufficient { "" } else { ", not enough" }
                ),
            }
        )?;
    }
    if let Some(n) = e.inodes {
        writeln!(
            w,
            "inode pass:  {}% of {} inodes used{}",
            n.usage_percent,
            n.inodes,
            if n.runs {
                format!(
                    ", at or above the high inode threshold: removes inode candidates in order \
                     until at most {} are in use",
                    n.target_used
                )
            } else {
                ", below the high inode threshold: it does not run".to_owned()
            }
        )?;
    }
    for stale in &e.stale_kubelet_intents {
        writeln!(w, "stale:       {}", escape_control(&stale.describe()))?;
    }
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
        return record_list(records, None).write(w, out.format());
    }
    for r in records {
        let line = serde_json::to_string(&record_json(r, None)).map_err(io::Error::other)?;
        writeln!(w, "{line}")?;
    }
    Ok(())
}
