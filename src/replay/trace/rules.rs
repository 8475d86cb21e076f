//! The trace format's original rules, through a `serde_json::Value`: every reason a line is
//! refused comes from here, in the order of precedence of the format's first version, and the
//! per-op conversions (an image, a container, an `fs` line, a policy, an image id's limits, an
//! `"at"`) that the typed path in `trace.rs` shares, so both paths accept and build the same
//! operations. Nothing here reads input: it turns one line's text or value into a `TraceOp`.

use std::time::Duration;

use serde_json::{Map, Value};

use super::{ContainerLine, FsLine, ImageInodes, ImageLine, OPS, PolicyLine, TraceOp};
use crate::format::{TIME_RANGE, TimeError, parse_rfc3339_checked};
use crate::gc::{ByteBudget, GcPolicy, InodeThresholds};
use crate::model::{ContainerState, ImageId, RuntimeContainer, RuntimeImage, UnixNanos};

/// The format's original rules, through a `serde_json::Value`: every reason a line is refused
/// comes from here.
pub(super) fn parse_line_by_value(raw: &str) -> Result<(UnixNanos, TraceOp), String> {
    let value: Value = serde_json::from_str(raw).map_err(|e| format!("not JSON: {e}"))?;
    let Value::Object(mut obj) = value else {
        return Err("a trace line must be a JSON object".to_owned());
    };
    let at = obj
        .remove("at")
        .ok_or_else(|| "missing \"at\"".to_owned())
        .and_then(|v| parse_at(&v))?;
    let (key, body) = single_op(obj)?;
    let op = match key.as_str() {
        "images" => {
            let (images, inodes) = split_images(
                typed::<Vec<ImageLine>>(body, "images")?
                    .into_iter()
                    .map(image)
                    .collect::<Result<_, String>>()?,
            );
            TraceOp::Images(images, inodes)
        }
        "containers" => TraceOp::Containers(
            typed::<Vec<ContainerLine>>(body, "containers")?
                .into_iter()
                .map(container)
                .collect::<Result<_, _>>()?,
        ),
        "fs" => fs_op(typed::<FsLine>(body, "fs")?, false)?,
        "container_fs" => fs_op(typed::<FsLine>(body, "container_fs")?, true)?,
        "policy" => TraceOp::Policy(policy(typed::<PolicyLine>(body, "policy")?)?),
        "detect" | "gc" | "delete_unused" | "restart" => {
            empty_object(&body, &key)?;
            match key.as_str() {
                "detect" => TraceOp::Detect,
                "gc" => TraceOp::Gc,
                "delete_unused" => TraceOp::DeleteUnused,
                _ => TraceOp::Restart,
            }
        }
        "remove_fails" => {
            let ids = typed::<Vec<String>>(body, "remove_fails")?;
            for id in &ids {
                check_image_id(id, "\"remove_fails\" entry")?;
            }
            TraceOp::RemoveFails(ids)
        }
        "fs_fails" => TraceOp::FsFails(fs_fails(typed::<Option<String>>(body, "fs_fails")?)?),
        "note" => TraceOp::Note(typed::<String>(body, "note")?),
        other => {
            return Err(format!(
                "unknown operation {other:?}; expected one of {}",
                OPS.join(", ")
            ));
        }
    };
    Ok((at, op))
}

pub(super) fn image(i: ImageLine) -> Result<(RuntimeImage, Option<u64>), String> {
    check_image_id(&i.id, "image \"id\"")?;
    // Read element by element, the tags have room for four (a quarter of a 100k node's
    // list as it is held): trimmed, as the runtime's decode trims its name lists.
    let mut tags = i.tags;
    tags.shrink_to_fit();
    Ok((
        RuntimeImage {
            id: ImageId(i.id),
            repo_tags: tags,
            repo_digests: Vec::new(),
            size: i.size,
            pinned: i.pinned,
            runtime_handler: i.runtime_handler,
        },
        i.inodes,
    ))
}

/// The images, and the inodes of those whose line gives them (the original rules' path).
fn split_images(images: Vec<(RuntimeImage, Option<u64>)>) -> (Vec<RuntimeImage>, ImageInodes) {
    let mut inodes = ImageInodes::new();
    let mut images: Vec<RuntimeImage> = images
        .into_iter()
        .map(|(image, n)| {
            if let Some(n) = n {
                inodes.insert(image.id.0.clone(), n);
            }
            image
        })
        .collect();
    images.shrink_to_fit();
    (images, inodes)
}

/// An `fs_fails` body: the message ImageFsInfo fails with (not empty), or `null`.
pub(super) fn fs_fails(message: Option<String>) -> Result<Option<String>, String> {
    match message {
        Some(m) if m.is_empty() => Err("\"fs_fails\" is empty; give a message or null".to_owned()),
        other => Ok(other),
    }
}

/// An `fs` (or `container_fs`) line: `inodes` and `inodes_free` go together, free at most
/// the count.
pub(super) fn fs_op(fs: FsLine, container: bool) -> Result<TraceOp, String> {
    let what = if container { "container_fs" } else { "fs" };
    let inodes = match (fs.inodes, fs.inodes_free) {
        (None, None) => None,
        (Some(inodes), Some(free)) if free <= inodes => Some((inodes, free)),
        (Some(inodes), Some(free)) => {
            return Err(format!(
                "{what:?}: \"inodes_free\" {free} is more than \"inodes\" {inodes}"
            ));
        }
        _ => {
            return Err(format!(
                "{what:?}: \"inodes\" and \"inodes_free\" are given together or not at all"
            ));
        }
    };
    let (capacity, available) = (fs.capacity, fs.available);
    Ok(if container {
        TraceOp::ContainerFs {
            capacity,
            available,
            inodes,
        }
    } else {
        TraceOp::Fs {
            capacity,
            available,
            inodes,
        }
    })
}

pub(super) fn policy(p: PolicyLine) -> Result<GcPolicy, String> {
    fn pair<T>(high: Option<T>, low: Option<T>, what: &str) -> Result<Option<(T, T)>, String> {
        match (high, low) {
            (None, None) => Ok(None),
            (Some(high), Some(low)) => Ok(Some((high, low))),
            _ => Err(format!(
                "\"{what}_high\" and \"{what}_low\" are given together or not at all"
            )),
        }
    }
    let inodes = pair(p.inodes_high, p.inodes_low, "inodes")?;
    let bytes = pair(p.bytes_high, p.bytes_low, "bytes")?;
    let policy = GcPolicy {
        high_threshold_percent: p.high,
        low_threshold_percent: p.low,
        min_age: Duration::from_secs(p.min_age_s),
        max_age: Duration::from_secs(p.max_age_s),
        inodes: inodes.map(|(high, low)| InodeThresholds { high, low }),
        bytes: bytes.map(|(high, low)| ByteBudget { high, low }),
    };
    policy.validate().map_err(|e| e.to_string())?;
    Ok(policy)
}

fn single_op(obj: Map<String, Value>) -> Result<(String, Value), String> {
    let mut entries = obj.into_iter();
    match (entries.next(), entries.next()) {
        (Some((key, body)), None) => Ok((key, body)),
        (None, _) => Err(format!("no operation; expected one of {}", OPS.join(", "))),
        (Some((a, _)), Some((b, _))) => Err(format!(
            "more than one operation ({a:?} and {b:?}); a line holds exactly one"
        )),
    }
}

fn typed<T: serde::de::DeserializeOwned>(body: Value, what: &str) -> Result<T, String> {
    serde_json::from_value(body).map_err(|e| format!("invalid {what:?}: {e}"))
}

fn empty_object(body: &Value, key: &str) -> Result<(), String> {
    match body {
        Value::Object(m) if m.is_empty() => Ok(()),
        _ => Err(format!("{key:?} takes an empty object: {{}}")),
    }
}

/// The longest image id the store keeps (its key layout's length field is 16 bits).
const MAX_IMAGE_ID_BYTES: usize = u16::MAX as usize;

/// Refuses an image id the store cannot key a record by: empty, with a NUL byte, or longer
/// than 65,535 bytes. `what` names the field.
pub(super) fn check_image_id(id: &str, what: &str) -> Result<(), String> {
    if id.is_empty() {
        Err(format!("{what} is empty"))
    } else if id.contains('\0') {
        Err(format!("{what} contains a NUL byte"))
    } else if id.len() > MAX_IMAGE_ID_BYTES {
        Err(format!(
            "{what} is {} bytes long; an image id is at most {MAX_IMAGE_ID_BYTES} bytes",
            id.len()
        ))
    } else {
        Ok(())
    }
}

pub(super) fn container(c: ContainerLine) -> Result<RuntimeContainer, String> {
    check_image_id(&c.image_id, "container \"image_id\"")?;
    let state = match c.state.as_str() {
        "running" => ContainerState::Running,
        "exited" => ContainerState::Exited,
        other => {
            return Err(format!(
                "container {:?}: state {other:?} is not \"running\" or \"exited\"",
                c.id
            ));
        }
    };
    Ok(RuntimeContainer {
        id: c.id,
        pod_sandbox_id: String::new(),
        image: c.image_id.clone(),
        image_id: ImageId(c.image_id),
        state,
        runtime_handler: c.runtime_handler,
    })
}

pub(super) fn parse_at(v: &Value) -> Result<UnixNanos, String> {
    match v {
        Value::Number(n) if n.is_f64() => Err(format!(
            "\"at\" {n} is not a whole number of seconds since 1970"
        )),
        Value::Number(n) => n
            .as_i64()
            .filter(|s| (0..=i64::MAX / 1_000_000_000).contains(s))
            .map(UnixNanos::from_secs)
            .ok_or_else(|| {
                format!("\"at\" {n} seconds is outside the representable range ({TIME_RANGE})")
            }),
        Value::String(s) => match parse_rfc3339_checked(s) {
            Ok(at) => Ok(at),
            Err(TimeError::OutOfRange) => Err(format!(
                "\"at\" {s:?} is outside the representable range ({TIME_RANGE})"
            )),
            Err(TimeError::Syntax) => Err(format!(
                "\"at\" {s:?} is not RFC 3339 (like 2026-01-02T03:04:05Z)"
            )),
        },
        _ => Err("\"at\" must be integer unix seconds or an RFC 3339 string".to_owned()),
    }
}
