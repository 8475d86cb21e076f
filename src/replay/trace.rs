//! The replay trace format: JSON lines, each an object with `"at"` (integer unix seconds or
//! RFC 3339) and exactly one operation key. Parsing checks everything before anything runs:
//! a bad line is reported with its number and the reason.

use std::time::Duration;

use serde::Deserialize;
use serde_json::{Map, Value};

use crate::gc::GcPolicy;
use crate::model::{ContainerState, ImageId, RuntimeContainer, RuntimeImage, UnixNanos};

/// One parsed trace line.
#[derive(Clone, Debug, PartialEq)]
pub struct TraceLine {
    /// 1-based line number in the trace.
    pub line: usize,
    pub at: UnixNanos,
    pub op: TraceOp,
}

/// What a trace line does.
#[derive(Clone, Debug, PartialEq)]
pub enum TraceOp {
    Images(Vec<RuntimeImage>),
    Containers(Vec<RuntimeContainer>),
    Fs { capacity: u64, available: u64 },
    Policy(GcPolicy),
    Detect,
    Gc,
    DeleteUnused,
    Restart,
    RemoveFails(Vec<String>),
}

/// A line that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {reason}")]
pub struct TraceError {
    pub line: usize,
    pub reason: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ImageLine {
    id: String,
    size: u64,
    #[serde(default)]
    pinned: bool,
    #[serde(default)]
    tags: Vec<String>,
    #[serde(default)]
    runtime_handler: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ContainerLine {
    id: String,
    image_id: String,
    state: String,
    #[serde(default)]
    runtime_handler: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FsLine {
    capacity: u64,
    available: u64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PolicyLine {
    high: i64,
    low: i64,
    min_age_s: u64,
    max_age_s: u64,
}

const OPS: &[&str] = &[
    "images",
    "containers",
    "fs",
    "policy",
    "detect",
    "gc",
    "delete_unused",
    "restart",
    "remove_fails",
];

/// Parses a whole trace. Blank lines are skipped; times must not go backwards.
pub fn parse_trace(text: &str) -> Result<Vec<TraceLine>, TraceError> {
    let mut out: Vec<TraceLine> = Vec::new();
    for (index, raw) in text.lines().enumerate() {
        let line = index + 1;
        if raw.trim().is_empty() {
            continue;
        }
        let parsed = parse_line(raw).map_err(|reason| TraceError { line, reason })?;
        if let Some(prev) = out.last().filter(|prev| parsed.0 < prev.at) {
            return Err(TraceError {
                line,
                reason: format!("\"at\" goes back in time (line {} is later)", prev.line),
            });
        }
        out.push(TraceLine {
            line,
            at: parsed.0,
            op: parsed.1,
        });
    }
    Ok(out)
}

fn parse_line(raw: &str) -> Result<(UnixNanos, TraceOp), String> {
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
        "images" => TraceOp::Images(
            typed::<Vec<ImageLine>>(body, "images")?
                .into_iter()
                .map(|i| {
                    check_image_id(&i.id, "image \"id\"")?;
                    Ok(RuntimeImage {
                        id: ImageId(i.id),
                        repo_tags: i.tags,
                        repo_digests: Vec::new(),
                        size: i.size,
                        pinned: i.pinned,
                        runtime_handler: i.runtime_handler,
                    })
                })
                .collect::<Result<_, String>>()?,
        ),
        "containers" => TraceOp::Containers(
            typed::<Vec<ContainerLine>>(body, "containers")?
                .into_iter()
                .map(container)
                .collect::<Result<_, _>>()?,
        ),
        "fs" => {
            let fs = typed::<FsLine>(body, "fs")?;
            TraceOp::Fs {
                capacity: fs.capacity,
                available: fs.available,
            }
        }
        "policy" => {
            let p = typed::<PolicyLine>(body, "policy")?;
            let policy = GcPolicy {
                high_threshold_percent: p.high,
                low_threshold_percent: p.low,
                min_age: Duration::from_secs(p.min_age_s),
                max_age: Duration::from_secs(p.max_age_s),
            };
            policy.validate().map_err(|e| e.to_string())?;
            TraceOp::Policy(policy)
        }
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
        other => {
            return Err(format!(
                "unknown operation {other:?}; expected one of {}",
                OPS.join(", ")
            ));
        }
    };
    Ok((at, op))
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
fn check_image_id(id: &str, what: &str) -> Result<(), String> {
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

fn container(c: ContainerLine) -> Result<RuntimeContainer, String> {
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

/// The range of times a trace can hold: unix nanoseconds in an i64, from 1970 on.
const TIME_RANGE: &str = "1970-01-01T00:00:00Z to 2262-04-11T23:47:16Z";

fn parse_at(v: &Value) -> Result<UnixNanos, String> {
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

/// Why a time does not parse.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TimeError {
    /// Not `YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM)`, or not a calendar date.
    Syntax,
    /// A valid date before 1970 or after 2262-04-11 (i64 nanoseconds).
    OutOfRange,
}

/// Parses `YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM)`.
pub fn parse_rfc3339(s: &str) -> Option<UnixNanos> {
    parse_rfc3339_checked(s).ok()
}

fn parse_rfc3339_checked(s: &str) -> Result<UnixNanos, TimeError> {
    parse_rfc3339_parts(s).ok_or(TimeError::Syntax)?
}

/// `None` for a syntax error; `Some(Err(OutOfRange))` for a date out of range.
fn parse_rfc3339_parts(s: &str) -> Option<Result<UnixNanos, TimeError>> {
    let b = s.as_bytes();
    if b.len() < 20
        || b[4] != b'-'
        || b[7] != b'-'
        || !matches!(b[10], b'T' | b't' | b' ')
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    let num = |from: usize, to: usize| -> Option<i64> {
        let part = s.get(from..to)?;
        if part.bytes().all(|c| c.is_ascii_digit()) {
            part.parse().ok()
        } else {
            None
        }
    };
    let (year, month, day) = (num(0, 4)?, num(5, 7)?, num(8, 10)?);
    let (hour, minute, second) = (num(11, 13)?, num(14, 16)?, num(17, 19)?);
    if !(1..=12).contains(&month)
        || day < 1
        || day > days_in_month(year, month)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }
    let mut rest = &s[19..];
    let mut nanos: i64 = 0;
    if let Some(frac) = rest.strip_prefix('.') {
        let digits = frac.bytes().take_while(|c| c.is_ascii_digit()).count();
        if digits == 0 || digits > 9 {
            return None;
        }
        nanos = frac[..digits].parse::<i64>().ok()? * 10i64.pow((9 - digits) as u32);
        rest = &frac[digits..];
    }
    let offset_secs = match rest {
        "Z" | "z" => 0,
        // Bytes, not string slices: a multi-byte character in the offset must be a syntax
        // error, not a slice off a char boundary (found by the replay fuzz target).
        _ if rest.len() == 6
            && (rest.starts_with('+') || rest.starts_with('-'))
            && rest.as_bytes()[3] == b':' =>
        {
            let two_digits = |part: Option<&str>| -> Option<i64> {
                let part = part?;
                if part.bytes().all(|c| c.is_ascii_digit()) {
                    part.parse().ok()
                } else {
                    None
                }
            };
            let h = two_digits(rest.get(1..3))?;
            let m = two_digits(rest.get(4..6))?;
            if h > 23 || m > 59 {
                return None;
            }
            let sign = if rest.starts_with('-') { -1 } else { 1 };
            sign * (h * 3600 + m * 60)
        }
        _ => return None,
    };
    let days = days_from_civil(year, month, day);
    let secs = days * 86_400 + hour * 3600 + minute * 60 + second - offset_secs;
    if secs < 0 {
        return Some(Err(TimeError::OutOfRange));
    }
    Some(
        secs.checked_mul(1_000_000_000)
            .and_then(|n| n.checked_add(nanos))
            .map(UnixNanos)
            .ok_or(TimeError::OutOfRange),
    )
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_times() {
        let cases = [
            ("1970-01-01T00:00:00Z", Some(0)),
            ("2026-11-21T19:53:00Z", Some(1_795_290_780)),
            ("2024-02-29T12:00:00+02:00", Some(1_709_200_800)),
            ("2023-02-29T12:00:00Z", None),
            ("2026-11-21 19:53:00", None),
            ("not a time at all!!", None),
            // The replay fuzz target's crash: a two-byte character across the offset's
            // colon position panicked on a string slice.
            ("2026-02-02T03:04:05.5+0\u{3fd}0 ", None),
            ("2026-02-02T03:04:05+-5:00", None),
            ("2026-02-02T03:04:05+05:-0", None),
        ];
        for (s, want) in cases {
            assert_eq!(parse_rfc3339(s).map(UnixNanos::as_secs), want, "{s}");
        }
        assert_eq!(
            parse_rfc3339("1970-01-01T00:00:01.5Z"),
            Some(UnixNanos(1_500_000_000))
        );
    }

    #[test]
    fn bad_lines_name_the_line_and_the_reason() {
        let cases = [
            ("{\"at\": 1, \"detect\": {}}\nnope", 2, "not JSON"),
            ("{\"detect\": {}}", 1, "missing \"at\""),
            ("{\"at\": 1}", 1, "no operation"),
            (
                "{\"at\": 1, \"gc\": {}, \"detect\": {}}",
                1,
                "more than one operation",
            ),
            ("{\"at\": 1, \"explode\": {}}", 1, "unknown operation"),
            (
                "{\"at\": 1, \"policy\": {\"high\": 101, \"low\": 80, \"min_age_s\": 0, \"max_age_s\": 0}}",
                1,
                "invalid HighThresholdPercent 101, must be in range [0-100]",
            ),
            (
                "{\"at\": 5, \"gc\": {}}\n{\"at\": 4, \"gc\": {}}",
                2,
                "goes back in time",
            ),
            (
                "{\"at\": 1, \"containers\": [{\"id\": \"c\", \"image_id\": \"i\", \"state\": \"paused\"}]}",
                1,
                "is not \"running\"",
            ),
            (
                "{\"at\": 1, \"images\": [{\"id\": \"i\"}]}",
                1,
                "missing field `size`",
            ),
            (
                "{\"at\": -3, \"gc\": {}}",
                1,
                "-3 seconds is outside the representable range",
            ),
            ("{\"at\": 1.5, \"gc\": {}}", 1, "not a whole number"),
            (
                "{\"at\": 99999999999999, \"gc\": {}}",
                1,
                "outside the representable range (1970-01-01T00:00:00Z to 2262-04-11T23:47:16Z)",
            ),
            (
                "{\"at\": \"9999-12-31T23:59:59Z\", \"gc\": {}}",
                1,
                "\"9999-12-31T23:59:59Z\" is outside the representable range",
            ),
            (
                "{\"at\": \"1969-12-31T23:59:59Z\", \"gc\": {}}",
                1,
                "is outside the representable range",
            ),
            (
                "{\"at\": \"2026-13-01T00:00:00Z\", \"gc\": {}}",
                1,
                "is not RFC 3339",
            ),
            (
                "{\"at\": 1, \"images\": [{\"id\": \"\", \"size\": 1}]}",
                1,
                "image \"id\" is empty",
            ),
            (
                "{\"at\": 1, \"containers\": [{\"id\": \"c\", \"image_id\": \"a\\u0000b\", \"state\": \"running\"}]}",
                1,
                "container \"image_id\" contains a NUL byte",
            ),
            (
                "{\"at\": 1, \"remove_fails\": [\"\"]}",
                1,
                "\"remove_fails\" entry is empty",
            ),
            ("{\"at\": 1, \"gc\": 7}", 1, "takes an empty object"),
        ];
        for (text, line, reason) in cases {
            let err = parse_trace(text).expect_err(text);
            assert_eq!(err.line, line, "{text}");
            assert!(err.reason.contains(reason), "{text}: {}", err.reason);
        }
    }

    #[test]
    fn a_good_trace_parses() {
        let text = r#"{"at": 10, "images": [{"id": "sha256:a", "size": 5, "tags": ["a:1"]}]}

{"at": "1970-01-01T00:00:20Z", "containers": [{"id": "c1", "image_id": "sha256:a", "state": "running"}]}
{"at": 30, "fs": {"capacity": 100, "available": 10}}
{"at": 40, "gc": {}}"#;
        let trace = parse_trace(text).expect("parses");
        assert_eq!(trace.len(), 4);
        assert_eq!(trace[1].line, 3);
        assert_eq!(trace[1].at, UnixNanos::from_secs(20));
        assert_eq!(trace[3].op, TraceOp::Gc);
    }
}
