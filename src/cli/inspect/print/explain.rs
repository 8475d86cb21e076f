//! Printing for `imagekeeper inspect explain`: the GC decision for every image (why it stays
//! or would go, in removal order), the space pass's summary, and the totals, as a table, JSON
//! or a List. It prints the `Explanation` the library computed and decides nothing itself;
//! the JSON fields and the summary lines are public contracts (README, output formats page).

use std::io::{self, Write};

use imagekeeper::format::{format_ago, format_rfc3339, format_size, go_duration};
use imagekeeper::gc::{Decision, Explanation, ImageExplanation, SpacePass};
use imagekeeper::inspect::escape_control;
use imagekeeper::store::StoredRecord;
use serde_json::{Value, json};

use super::{handler, json_out, record_item, record_json, shown_id, time_json, when};
use crate::cli::output::{Column, Format, KubeList, OutputArgs, is_list, write_table};

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
                obj.insert("runtimeLabelled".into(), json!(pin.runtime_labelled));
            }
            obj.insert(
                "kubeletPulledAt".into(),
                json!(i.kubelet_pulled_at.map(format_rfc3339)),
            );
            if let Some(source) = &i.needed_by {
                obj.insert("neededBy".into(), json!(source));
            }
            // The names of the kubelet's observed preloaded records (shown, not a use).
            if !i.kubelet_preloaded.is_empty() {
                obj.insert("kubeletPreloaded".into(), json!(i.kubelet_preloaded));
            }
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
                // The names of the kubelet's observed preloaded records (shown, not a use).
                if !i.kubelet_preloaded.is_empty() {
                    obj.insert("kubelet_preloaded".into(), json!(i.kubelet_preloaded));
                }
                // Kept for the cluster: what needs it (issue 55; an extension).
                if let Some(source) = &i.needed_by {
                    obj.insert("needed_by".into(), json!(source));
                }
                // A kept image: whether the runtime carries it (issue 36; an extension).
                if let Some(pin) = &i.runtime_pin {
                    obj.insert("keep".into(), json!(pin.keep));
                    obj.insert("runtime_pinned".into(), json!(pin.runtime_pinned));
                    obj.insert("runtime_pin_note".into(), json!(pin.runtime_pin_note));
                    obj.insert("runtime_labelled".into(), json!(pin.runtime_labelled));
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
                // Under `imageGCPolicy = predictive` (issue 39; an extension).
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
        Some(pin) => imagekeeper::gc::runtime_pins::runtime_pinned_text(
            pin.runtime_pinned,
            pin.runtime_labelled,
            &pin.runtime_pin_note,
        ),
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
