//! The workload trace's signal lines: what the cluster knew, beside what the node ran (issue
//! 55 item 4): a CronJob's schedule and images (`cronjob`), a pod bound to the node ahead of
//! its start (`bound`), a workload's rollout with its previous revision (`rollout`). Only the
//! `signals` policy of `imagekeeper simulate` reads them; every other policy skips them.
//!
//! Invariants: a parsed signal line has non-empty names, at most [`MAX_SIGNAL_IMAGES`] images
//! each a non-empty string, a schedule the CronJob controller reads (`gc::CronSchedule`), and
//! a time zone the IANA database knows (or none: UTC); anything else is refused with the field
//! named.

use serde_json::{Map, Value, json};

use crate::gc::{CronSchedule, CronZone, MAX_SIGNAL_IMAGES};

use super::{WorkloadOp, fields};

/// A `cronjob` line's body.
pub(super) fn parse_cronjob(value: Value) -> Result<WorkloadOp, String> {
    let mut body = fields(
        value,
        "cronjob",
        &["name", "schedule", "time_zone", "suspend", "images"],
    )?;
    let name = name(&mut body, "cronjob", "name")?;
    let schedule = match body.remove("schedule") {
        Some(Value::String(s)) => s,
        Some(_) => return Err("\"cronjob.schedule\" must be a string".to_owned()),
        None => return Err("missing \"cronjob.schedule\"".to_owned()),
    };
    let cron = CronSchedule::parse(&schedule).map_err(|e| format!("\"cronjob.schedule\": {e}"))?;
    let time_zone = match body.remove("time_zone") {
        None | Some(Value::Null) => None,
        Some(Value::String(z)) => Some(z),
        Some(_) => return Err("\"cronjob.time_zone\" must be a string".to_owned()),
    };
    let zone = match &time_zone {
        None => CronZone::utc(),
        Some(z) => CronZone::named(z).map_err(|e| format!("\"cronjob.time_zone\": {e}"))?,
    };
    let suspend = match body.remove("suspend") {
        None => false,
        Some(Value::Bool(b)) => b,
        Some(_) => return Err("\"cronjob.suspend\" must be true or false".to_owned()),
    };
    let images = images(&mut body, "cronjob", "images", true)?;
    Ok(WorkloadOp::CronJob {
        name,
        schedule,
        cron,
        time_zone,
        zone,
        suspend,
        images,
    })
}

/// A `bound` line's body.
pub(super) fn parse_bound(value: Value) -> Result<WorkloadOp, String> {
    let mut body = fields(value, "bound", &["pod", "images"])?;
    let pod = name(&mut body, "bound", "pod")?;
    // No images: the pod is gone (or names none).
    let images = images(&mut body, "bound", "images", false)?;
    Ok(WorkloadOp::Bound { pod, images })
}

/// A `rollout` line's body.
pub(super) fn parse_rollout(value: Value) -> Result<WorkloadOp, String> {
    let mut body = fields(value, "rollout", &["workload", "images", "previous"])?;
    let workload = name(&mut body, "rollout", "workload")?;
    let images = images(&mut body, "rollout", "images", true)?;
    let previous = images_or_none(&mut body, "rollout", "previous")?;
    Ok(WorkloadOp::Rollout {
        workload,
        images,
        previous,
    })
}

/// A required non-empty string field.
fn name(body: &mut Map<String, Value>, op: &str, field: &str) -> Result<String, String> {
    match body.remove(field) {
        Some(Value::String(s)) if !s.is_empty() => Ok(s),
        Some(Value::String(_)) => Err(format!("\"{op}.{field}\" is empty")),
        Some(_) => Err(format!("\"{op}.{field}\" must be a string")),
        None => Err(format!("missing \"{op}.{field}\"")),
    }
}

/// A required list of image names (`non_empty`: at least one).
fn images(
    body: &mut Map<String, Value>,
    op: &str,
    field: &str,
    non_empty: bool,
) -> Result<Vec<String>, String> {
    if !body.contains_key(field) {
        return Err(format!("missing \"{op}.{field}\""));
    }
    let list = images_or_none(body, op, field)?;
    if non_empty && list.is_empty() {
        return Err(format!("\"{op}.{field}\" names no image"));
    }
    Ok(list)
}

/// An optional list of image names (absent: none).
fn images_or_none(
    body: &mut Map<String, Value>,
    op: &str,
    field: &str,
) -> Result<Vec<String>, String> {
    let list = match body.remove(field) {
        None => return Ok(Vec::new()),
        Some(Value::Array(list)) => list,
        Some(_) => return Err(format!("\"{op}.{field}\" must be a list of image names")),
    };
    if list.len() > MAX_SIGNAL_IMAGES {
        return Err(format!(
            "\"{op}.{field}\" names {} images, more than the {MAX_SIGNAL_IMAGES} a line may",
            list.len()
        ));
    }
    list.into_iter()
        .enumerate()
        .map(|(i, v)| match v {
            Value::String(s) if !s.is_empty() => Ok(s),
            Value::String(_) => Err(format!("\"{op}.{field}[{i}]\" is empty")),
            _ => Err(format!("\"{op}.{field}[{i}]\" must be a string")),
        })
        .collect()
}

/// A signal line's body as [`super::parse_workload`] reads it back; `None` for other
/// operations.
pub(super) fn format_signal(op: &WorkloadOp) -> Option<(&'static str, Value)> {
    Some(match op {
        WorkloadOp::CronJob {
            name,
            schedule,
            time_zone,
            suspend,
            images,
            ..
        } => {
            let mut body = json!({"name": name, "schedule": schedule});
            if let (Some(zone), Some(map)) = (time_zone, body.as_object_mut()) {
                map.insert("time_zone".to_owned(), json!(zone));
            }
            if let Some(map) = body.as_object_mut() {
                map.insert("suspend".to_owned(), json!(suspend));
                map.insert("images".to_owned(), json!(images));
            }
            ("cronjob", body)
        }
        WorkloadOp::Bound { pod, images } => ("bound", json!({"pod": pod, "images": images})),
        WorkloadOp::Rollout {
            workload,
            images,
            previous,
        } => (
            "rollout",
            json!({"workload": workload, "images": images, "previous": previous}),
        ),
        WorkloadOp::Run { .. } | WorkloadOp::Restart => return None,
    })
}
