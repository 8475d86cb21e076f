//! The workload trace: what a node ran, as `imagekeeper simulate` reads it and `imagekeeper
//! inspect workload` writes it (a public contract, `docs/src/reference/workload-trace.md`).
//! JSON lines, one object per line, sorted by `"at"` (seconds from the trace's start, a
//! number): a `node` line first and once, then `run` and `restart` lines, and the signal lines
//! (`cronjob`, `bound`, `rollout`: what the cluster knew, `signals.rs`).
//!
//! Invariants: a [`Workload`] that [`parse_workload`] returns has its node line first, its
//! operations in non-decreasing time, every time and duration finite, non-negative and at
//! most 10 years, a valid GC policy (the kubelet's rules and messages), a
//! positive capacity, pull rate and GC period, and an image name and a positive size on every
//! run. A refused line is named by its 1-based number; unknown fields and operations are
//! refused, never ignored. `Workload`'s `Display` writes each line so that parsing it gives it
//! back.

use std::fmt;
use std::io::{BufRead, BufReader, Read};
use std::time::Duration;

use serde_json::{Map, Value, json};

use crate::gc::{CronSchedule, CronZone, GcPolicy};

mod signals;

/// The most bytes of a workload read (a file or stdin): 256 MiB, about two million runs.
pub(crate) const MAX_WORKLOAD_BYTES: u64 = 256 << 20;

/// The longest workload line, in bytes, without its line end: 64 KiB (a run line is about 100
/// bytes; an image name is at most a few hundred).
pub(crate) const MAX_WORKLOAD_LINE_BYTES: usize = 64 << 10;

/// The latest time and the longest duration a workload may give: 10 years of seconds.
pub(crate) const MAX_WORKLOAD_SECONDS: f64 = 10.0 * 365.0 * 86_400.0;

/// The node a workload runs on: its first line.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct WorkloadNode {
    /// When the trace starts (seconds; the node line's `"at"`).
    pub at: f64,
    /// The image filesystem's size in bytes.
    pub capacity: u64,
    /// Bytes on the image filesystem used by other things than images.
    pub other_used: u64,
    /// How fast a pull lands, in bytes per second.
    pub pull_bytes_per_s: u64,
    /// The GC policy: thresholds and ages (inode and byte budgets are not simulated).
    pub policy: GcPolicy,
    /// Seconds between two GC cycles.
    pub gc_period_s: f64,
    /// The unix time (seconds, UTC) of the trace's second 0, the calendar CronJob schedules
    /// are read in (default 0: 1970-01-01T00:00:00Z). Read only by the `signals` policy.
    pub start_unix_s: i64,
}

/// One operation after the node line.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub(crate) enum WorkloadOp {
    /// A container using `image` (of `size` bytes) starts and runs `for_s` seconds.
    Run {
        image: String,
        size: u64,
        for_s: f64,
    },
    /// The agent (or the kubelet) restarts.
    Restart,
    /// The cluster holds the CronJob `name` (set or replaced): it runs on `schedule` (in
    /// `time_zone`, UTC when none) unless suspended, its job template naming `images`.
    CronJob {
        name: String,
        /// The schedule as written.
        schedule: String,
        /// The schedule as the CronJob controller reads it.
        cron: CronSchedule,
        /// `spec.timeZone` as written, or none.
        time_zone: Option<String>,
        /// The zone the schedule is read in (UTC when `time_zone` is none).
        zone: CronZone,
        suspend: bool,
        images: Vec<String>,
    },
    /// The pod `pod` is bound to the node (set or replaced; no images: gone): each of `images`
    /// is needed from this line until a run of it starts.
    Bound { pod: String, images: Vec<String> },
    /// The workload `workload` rolled out `images`; `previous` are its previous revision's
    /// (the rollback set).
    Rollout {
        workload: String,
        images: Vec<String>,
        previous: Vec<String>,
    },
}

impl WorkloadOp {
    /// Whether the line declares what the cluster knows (read by the `signals` policy only).
    pub(crate) fn is_signal(&self) -> bool {
        matches!(
            self,
            WorkloadOp::CronJob { .. } | WorkloadOp::Bound { .. } | WorkloadOp::Rollout { .. }
        )
    }
}

/// One operation with its time and line number.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct WorkloadLine {
    /// 1-based line number in the trace (0 for a line built in code).
    pub line: usize,
    /// Seconds, as in the trace.
    pub at: f64,
    pub op: WorkloadOp,
}

/// A whole workload.
#[derive(Clone, Debug, PartialEq)]
pub struct Workload {
    /// The node line.
    pub(crate) node: WorkloadNode,
    /// The operations, in time order.
    pub(crate) ops: Vec<WorkloadLine>,
}

impl Workload {
    /// Whether a line declares what the cluster knows (`cronjob`, `bound`, `rollout`): without
    /// one, the `signals` policy knows nothing more than `predictive` and is its order exactly.
    pub fn declares_signals(&self) -> bool {
        self.ops.iter().any(|l| l.op.is_signal())
    }
}

/// A refused workload line (`line` 0: the workload as a whole).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {reason}")]
pub struct WorkloadLineError {
    /// The 1-based line number; 0: the workload as a whole.
    pub line: usize,
    /// Why the line was refused.
    pub reason: String,
}

/// Why a workload was not read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WorkloadError {
    /// A line was refused.
    #[error(transparent)]
    Line(#[from] WorkloadLineError),
    /// The input could not be read.
    #[error("reading: {0}")]
    Io(#[from] std::io::Error),
    /// The input is larger than 256 MiB.
    #[error("the workload is larger than {MAX_WORKLOAD_BYTES} bytes, the most read")]
    TooLarge,
}

/// Seconds as a [`Duration`] (the parser keeps them finite, non-negative and bounded).
pub(crate) fn seconds(s: f64) -> Duration {
    Duration::from_secs_f64(s.clamp(0.0, MAX_WORKLOAD_SECONDS))
}

/// Reads a workload from `reader` (stdin, or a file `operator_file` opened), at most 256 MiB,
/// a line at a time: a line longer than 64 KiB is refused as soon as its limit is passed,
/// naming the line (an endless line is a line too long, not a workload too large), and no
/// more than a line's limit is read past it.
pub fn read_workload(reader: impl Read) -> Result<Workload, WorkloadError> {
    let mut reader = BufReader::new(reader);
    let mut bytes = Vec::new();
    // A line with its end ("\r\n") at the limit fits; one byte more is too long.
    let most = MAX_WORKLOAD_LINE_BYTES as u64 + 2;
    for line in 1usize.. {
        let start = bytes.len();
        let read = (&mut reader).take(most).read_until(b'\n', &mut bytes)?;
        if read == 0 {
            break;
        }
        let got = &bytes[start..];
        let content = got.strip_suffix(b"\n").unwrap_or(got);
        let content = content.strip_suffix(b"\r").unwrap_or(content);
        if content.len() > MAX_WORKLOAD_LINE_BYTES {
            return Err(WorkloadLineError {
                line,
                reason: line_too_long(),
            }
            .into());
        }
        if bytes.len() as u64 > MAX_WORKLOAD_BYTES {
            return Err(WorkloadError::TooLarge);
        }
    }
    parse_workload_bytes(&bytes)
}

fn line_too_long() -> String {
    format!(
        "the line is longer than {MAX_WORKLOAD_LINE_BYTES} bytes, the most a workload line may hold"
    )
}

/// Parses a workload held in memory (a file read through `operator_file`, or stdin).
fn parse_workload_bytes(bytes: &[u8]) -> Result<Workload, WorkloadError> {
    let text = std::str::from_utf8(bytes).map_err(|e| {
        // The line of the first bad byte.
        let line = bytes[..e.valid_up_to()]
            .iter()
            .filter(|b| **b == b'\n')
            .count()
            + 1;
        WorkloadLineError {
            line,
            reason: "not UTF-8".to_owned(),
        }
    })?;
    Ok(parse_workload(text)?)
}

/// Parses a workload's text. Blank lines are skipped.
pub fn parse_workload(text: &str) -> Result<Workload, WorkloadLineError> {
    let mut node: Option<WorkloadNode> = None;
    let mut ops = Vec::new();
    let mut prev: Option<(usize, f64)> = None;
    for (index, raw) in text.split('\n').enumerate() {
        let line = index + 1;
        let raw = raw.strip_suffix('\r').unwrap_or(raw);
        let err = |reason: String| WorkloadLineError { line, reason };
        if raw.len() > MAX_WORKLOAD_LINE_BYTES {
            return Err(err(line_too_long()));
        }
        if raw.trim().is_empty() {
            continue;
        }
        let value = parse_json_line(raw).map_err(err)?;
        let Value::Object(mut object) = value else {
            return Err(err("not a JSON object".to_owned()));
        };
        let at = match object.remove("at") {
            None => return Err(err("missing \"at\"".to_owned())),
            Some(v) => seconds_field(&v, "\"at\"").map_err(err)?,
        };
        if let Some((prev_line, _)) = prev.filter(|(_, prev_at)| at < *prev_at) {
            return Err(err(format!(
                "\"at\" goes back in time (line {prev_line} is later)"
            )));
        }
        prev = Some((line, at));
        match &node {
            None => {
                if !object.contains_key("node") {
                    return Err(err("the first line must be the \"node\" line".to_owned()));
                }
                node = Some(parse_node(at, object).map_err(err)?);
            }
            Some(_) => ops.push(WorkloadLine {
                line,
                at,
                op: parse_op(object).map_err(err)?,
            }),
        }
    }
    let node = node.ok_or_else(|| WorkloadLineError {
        line: 0,
        reason: "the workload is empty: it needs a \"node\" line".to_owned(),
    })?;
    Ok(Workload { node, ops })
}

/// A line's JSON, refusing an object that gives a key twice (at any depth): serde_json
/// would keep the last one silently, so `{"at": 5, "at": 9}` would run at 9.
fn parse_json_line(raw: &str) -> Result<Value, String> {
    match serde_json::from_str::<UniqueKeys>(raw) {
        Ok(UniqueKeys(value)) => Ok(value),
        // A data error is the visitor's (a duplicate key): said without serde_json's "at line
        // 1", which would contradict the workload's line number.
        Err(e) if e.is_data() => {
            let text = e.to_string();
            let position = format!(" at line {} column {}", e.line(), e.column());
            let reason = text.strip_suffix(&position).unwrap_or(&text);
            Err(format!("{reason} (column {})", e.column()))
        }
        Err(e) => Err(format!("not JSON: {e}")),
    }
}

/// A JSON value whose objects hold each key once.
struct UniqueKeys(Value);

impl<'de> serde::Deserialize<'de> for UniqueKeys {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer
            .deserialize_any(UniqueKeysVisitor)
            .map(UniqueKeys)
    }
}

struct UniqueKeysVisitor;

impl<'de> serde::de::Visitor<'de> for UniqueKeysVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::new();
        while let Some(UniqueKeys(v)) = seq.next_element()? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if out.contains_key(&key) {
                return Err(serde::de::Error::custom(format!(
                    "the key {key:?} is given twice in one object"
                )));
            }
            let UniqueKeys(value) = map.next_value()?;
            out.insert(key, value);
        }
        Ok(Value::Object(out))
    }
}

fn parse_node(at: f64, mut object: Map<String, Value>) -> Result<WorkloadNode, String> {
    let node = object.remove("node").unwrap_or(Value::Null);
    let policy = object.remove("policy");
    let period = object.remove("gc_period_s");
    let start = object.remove("start_unix_s");
    if let Some(key) = object.keys().next() {
        return Err(format!(
            "unknown field {key:?} on the node line (expected \"node\", \"policy\", \"gc_period_s\", \"start_unix_s\")"
        ));
    }
    let start_unix_s = match start {
        None => 0,
        Some(v) => match v.as_i64() {
            Some(s) if (0..=MAX_START_UNIX_S).contains(&s) => s,
            _ => {
                return Err(format!(
                    "\"start_unix_s\" must be a whole number of seconds from 0 to {MAX_START_UNIX_S}"
                ));
            }
        },
    };
    let mut node = fields(
        node,
        "node",
        &["capacity", "other_used", "pull_bytes_per_s"],
    )?;
    let capacity = required_u64(&mut node, "node", "capacity")?;
    let other_used = optional_u64(&mut node, "node", "other_used")?.unwrap_or(0);
    let pull_bytes_per_s = required_u64(&mut node, "node", "pull_bytes_per_s")?;
    if capacity == 0 {
        return Err("\"node.capacity\" must be greater than 0".to_owned());
    }
    if other_used > capacity {
        return Err("\"node.other_used\" is larger than \"node.capacity\"".to_owned());
    }
    if pull_bytes_per_s == 0 {
        return Err("\"node.pull_bytes_per_s\" must be greater than 0".to_owned());
    }
    let mut gc = GcPolicy::default();
    if let Some(policy) = policy {
        let mut p = fields(policy, "policy", &["high", "low", "min_age_s", "max_age_s"])?;
        if let Some(v) = p.remove("high") {
            gc.high_threshold_percent = percent(&v, "policy.high")?;
        }
        if let Some(v) = p.remove("low") {
            gc.low_threshold_percent = percent(&v, "policy.low")?;
        }
        if let Some(v) = p.remove("min_age_s") {
            gc.min_age = seconds(seconds_field(&v, "\"policy.min_age_s\"")?);
        }
        if let Some(v) = p.remove("max_age_s") {
            gc.max_age = seconds(seconds_field(&v, "\"policy.max_age_s\"")?);
        }
        gc.validate().map_err(|e| format!("\"policy\": {e}"))?;
    }
    let gc_period_s = match period {
        None => 300.0,
        Some(v) => seconds_field(&v, "\"gc_period_s\"")?,
    };
    if gc_period_s < 1.0 {
        return Err("\"gc_period_s\" must be at least 1".to_owned());
    }
    Ok(WorkloadNode {
        at,
        capacity,
        other_used,
        pull_bytes_per_s,
        policy: gc,
        gc_period_s,
        start_unix_s,
    })
}

/// The latest `start_unix_s`: 9999-12-31T23:59:59Z.
const MAX_START_UNIX_S: i64 = 253_402_300_799;

/// The operations a line after the node line may give (the workload trace page has a row for
/// each: a test holds it to this list).
pub const WORKLOAD_OPERATIONS: [&str; 5] = ["run", "restart", "cronjob", "bound", "rollout"];

/// [`WORKLOAD_OPERATIONS`] as the parser's messages name them.
const OPERATIONS: &str = "\"run\", \"restart\", \"cronjob\", \"bound\" or \"rollout\"";

fn parse_op(mut object: Map<String, Value>) -> Result<WorkloadOp, String> {
    if object.contains_key("node") {
        return Err("the \"node\" line is given again: it comes once, first".to_owned());
    }
    let mut keys = object.keys();
    let (Some(key), None) = (keys.next().cloned(), keys.next()) else {
        return Err(if object.is_empty() {
            format!("no operation: a line needs one of {OPERATIONS}")
        } else {
            let names: Vec<&String> = object.keys().collect();
            format!("more than one operation: {names:?}")
        });
    };
    let value = object.remove(&key).unwrap_or(Value::Null);
    match key.as_str() {
        "run" => {
            let mut run = fields(value, "run", &["image", "size", "for_s"])?;
            let image = match run.remove("image") {
                Some(Value::String(s)) if !s.is_empty() => s,
                Some(Value::String(_)) => return Err("\"run.image\" is empty".to_owned()),
                Some(_) => return Err("\"run.image\" must be a string".to_owned()),
                None => return Err("missing \"run.image\"".to_owned()),
            };
            let size = required_u64(&mut run, "run", "size")?;
            if size == 0 {
                return Err("\"run.size\" must be greater than 0".to_owned());
            }
            let for_s = match run.remove("for_s") {
                Some(v) => seconds_field(&v, "\"run.for_s\"")?,
                None => return Err("missing \"run.for_s\"".to_owned()),
            };
            Ok(WorkloadOp::Run { image, size, for_s })
        }
        "restart" => {
            fields(value, "restart", &[])?;
            Ok(WorkloadOp::Restart)
        }
        "cronjob" => signals::parse_cronjob(value),
        "bound" => signals::parse_bound(value),
        "rollout" => signals::parse_rollout(value),
        "node" => Err("the \"node\" line is given again: it comes once, first".to_owned()),
        other => Err(format!(
            "unknown operation {other:?} (expected {OPERATIONS})"
        )),
    }
}

/// `value` as an object whose keys are all in `allowed`.
fn fields(value: Value, name: &str, allowed: &[&str]) -> Result<Map<String, Value>, String> {
    let Value::Object(map) = value else {
        return Err(format!("{name:?} must be an object"));
    };
    if let Some(key) = map.keys().find(|k| !allowed.contains(&k.as_str())) {
        let expected: Vec<String> = allowed.iter().map(|a| format!("{a:?}")).collect();
        return Err(if expected.is_empty() {
            format!("unknown field {key:?} in {name:?} (it takes none)")
        } else {
            format!(
                "unknown field {key:?} in {name:?} (expected {})",
                expected.join(", ")
            )
        });
    }
    Ok(map)
}

fn required_u64(map: &mut Map<String, Value>, name: &str, field: &str) -> Result<u64, String> {
    optional_u64(map, name, field)?.ok_or_else(|| format!("missing \"{name}.{field}\""))
}

fn optional_u64(
    map: &mut Map<String, Value>,
    name: &str,
    field: &str,
) -> Result<Option<u64>, String> {
    match map.remove(field) {
        None => Ok(None),
        Some(v) => v
            .as_u64()
            .map(Some)
            .ok_or_else(|| format!("\"{name}.{field}\" must be a non-negative integer")),
    }
}

fn percent(value: &Value, name: &str) -> Result<i64, String> {
    value
        .as_i64()
        .ok_or_else(|| format!("\"{name}\" must be an integer percent"))
}

/// A number of seconds: finite, non-negative, at most [`MAX_WORKLOAD_SECONDS`].
fn seconds_field(value: &Value, name: &str) -> Result<f64, String> {
    let Some(s) = value.as_f64() else {
        return Err(format!("{name} must be a number of seconds"));
    };
    if !(0.0..=MAX_WORKLOAD_SECONDS).contains(&s) {
        return Err(format!(
            "{name} must be between 0 and {MAX_WORKLOAD_SECONDS} seconds"
        ));
    }
    Ok(s)
}

/// A number of seconds as JSON: an integer when it is one, else the shortest decimal.
fn number(s: f64) -> Value {
    if s.fract() == 0.0 && s.abs() < 9.0e15 {
        json!(s as i64)
    } else {
        json!(s)
    }
}

/// The node line, as [`parse_workload`] reads it back.
fn format_node(node: &WorkloadNode) -> String {
    let mut value = json!({
        "at": number(node.at),
        "node": {
            "capacity": node.capacity,
            "other_used": node.other_used,
            "pull_bytes_per_s": node.pull_bytes_per_s,
        },
        "policy": {
            "high": node.policy.high_threshold_percent,
            "low": node.policy.low_threshold_percent,
            "min_age_s": number(node.policy.min_age.as_secs_f64()),
            "max_age_s": number(node.policy.max_age.as_secs_f64()),
        },
        "gc_period_s": number(node.gc_period_s),
    });
    // Written only when given, so a workload without it reads and writes as before.
    if let (true, Some(map)) = (node.start_unix_s != 0, value.as_object_mut()) {
        map.insert("start_unix_s".to_owned(), json!(node.start_unix_s));
    }
    value.to_string()
}

/// One operation's line, as [`parse_workload`] reads it back.
fn format_line(line: &WorkloadLine) -> String {
    match &line.op {
        WorkloadOp::Run { image, size, for_s } => json!({
            "at": number(line.at),
            "run": {"image": image, "size": size, "for_s": number(*for_s)},
        }),
        WorkloadOp::Restart => json!({"at": number(line.at), "restart": {}}),
        op => match signals::format_signal(op) {
            Some((name, body)) => {
                let mut object = Map::new();
                object.insert("at".to_owned(), number(line.at));
                object.insert(name.to_owned(), body);
                Value::Object(object)
            }
            None => json!({"at": number(line.at)}),
        },
    }
    .to_string()
}

impl fmt::Display for Workload {
    /// The whole workload, one line each, each ending in `\n`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}", format_node(&self.node))?;
        for line in &self.ops {
            writeln!(f, "{}", format_line(line))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NODE: &str = r#"{"at": 0, "node": {"capacity": 1000, "other_used": 100, "pull_bytes_per_s": 10}, "policy": {"high": 85, "low": 80, "min_age_s": 120, "max_age_s": 0}, "gc_period_s": 300}"#;

    #[test]
    fn a_workload_round_trips_through_its_lines() {
        let text = format!(
            "{NODE}\n{{\"at\": 12.5, \"run\": {{\"image\": \"reg/app:1\", \"size\": 70, \"for_s\": 600}}}}\n\n{{\"at\": 3600, \"restart\": {{}}}}\n"
        );
        let workload = parse_workload(&text).expect("parses");
        assert_eq!(workload.node.capacity, 1000);
        assert_eq!(workload.node.policy.min_age, Duration::from_secs(120));
        assert_eq!(
            workload.ops,
            vec![
                WorkloadLine {
                    line: 2,
                    at: 12.5,
                    op: WorkloadOp::Run {
                        image: "reg/app:1".into(),
                        size: 70,
                        for_s: 600.0
                    }
                },
                WorkloadLine {
                    line: 4,
                    at: 3600.0,
                    op: WorkloadOp::Restart
                },
            ]
        );
        let written = workload.to_string();
        assert_eq!(
            written.lines().nth(1),
            Some(r#"{"at":12.5,"run":{"image":"reg/app:1","size":70,"for_s":600}}"#)
        );
        let again = parse_workload(&written).expect("parses back");
        assert_eq!(again.node, workload.node);
        let ops: Vec<(f64, WorkloadOp)> = again.ops.into_iter().map(|l| (l.at, l.op)).collect();
        let want: Vec<(f64, WorkloadOp)> = workload.ops.into_iter().map(|l| (l.at, l.op)).collect();
        assert_eq!(ops, want);
    }

    /// An endless line (a stream with no line end) is refused at the line limit, naming
    /// its line, after reading no more than that line's limit: not at the workload's cap.
    #[test]
    fn an_endless_line_is_refused_at_the_line_limit_not_the_workload_cap() {
        let mut read = 0u64;
        let node = format!("{NODE}\n");
        let endless = CountingReader {
            inner: node.as_bytes().chain(std::io::repeat(b'x')),
            read: &mut read,
        };
        let err = read_workload(endless).expect_err("an endless line is refused");
        assert_eq!(
            err.to_string(),
            "line 2: the line is longer than 65536 bytes, the most a workload line may hold"
        );
        assert!(read < 1 << 20, "read {read} bytes");
    }

    /// A reader that counts the bytes read through it.
    struct CountingReader<'a, R> {
        inner: R,
        read: &'a mut u64,
    }

    impl<R: Read> Read for CountingReader<'_, R> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let n = self.inner.read(buf)?;
            *self.read += n as u64;
            Ok(n)
        }
    }

    /// The signal lines read and write back as they were given, the node line's
    /// `start_unix_s` with them (written only when given).
    #[test]
    fn signal_lines_round_trip() {
        let text = format!(
            "{}\n{}\n{}\n{}\n{}\n",
            NODE.replace(
                "\"gc_period_s\": 300",
                "\"gc_period_s\": 300, \"start_unix_s\": 1704067200"
            ),
            r#"{"at": 1, "cronjob": {"name": "batch/nightly", "schedule": "0 2 * * *", "time_zone": "UTC", "suspend": false, "images": ["reg/etl:1", "reg/etl-init:1"]}}"#,
            r#"{"at": 2, "cronjob": {"name": "batch/weekly", "schedule": "@weekly", "time_zone": "Europe/Paris", "images": ["reg/report:3"]}}"#,
            r#"{"at": 3, "bound": {"pod": "ci/build-7", "images": ["reg/init:1", "reg/build:4"]}}"#,
            r#"{"at": 4, "rollout": {"workload": "shop/web", "images": ["reg/web:2"], "previous": ["reg/web:1"]}}"#,
        );
        let workload = parse_workload(&text).expect("parses");
        assert_eq!(workload.node.start_unix_s, 1_704_067_200);
        let WorkloadOp::CronJob {
            name,
            cron,
            suspend,
            images,
            time_zone,
            ..
        } = &workload.ops[0].op
        else {
            panic!("{:?}", workload.ops[0]);
        };
        assert_eq!(name, "batch/nightly");
        assert_eq!(*cron, CronSchedule::parse("0 2 * * *").expect("a schedule"));
        assert_eq!(
            (*suspend, images.len(), time_zone.as_deref()),
            (false, 2, Some("UTC"))
        );
        let WorkloadOp::CronJob { zone, .. } = &workload.ops[1].op else {
            panic!("{:?}", workload.ops[1]);
        };
        assert_eq!(zone.name(), "Europe/Paris");
        assert!(workload.ops.iter().all(|l| l.op.is_signal()));
        let written = workload.to_string();
        assert_eq!(
            written.lines().nth(2),
            Some(
                r#"{"at":2,"cronjob":{"name":"batch/weekly","schedule":"@weekly","time_zone":"Europe/Paris","suspend":false,"images":["reg/report:3"]}}"#
            )
        );
        let again = parse_workload(&written).expect("parses back");
        assert_eq!(again.node, workload.node);
        let ops = |w: &Workload| {
            w.ops
                .iter()
                .map(|l| (l.at, l.op.clone()))
                .collect::<Vec<_>>()
        };
        assert_eq!(ops(&again), ops(&workload));
        // Without it, the node line is written as before.
        let plain = parse_workload(NODE).expect("parses");
        assert!(!plain.to_string().contains("start_unix_s"));
    }

    /// Malformed signal lines, a field at a time (cron fields above all): each is refused
    /// naming its line and the field, never a panic.
    #[test]
    fn malformed_signal_lines_are_refused_naming_the_line() {
        let cron = |body: &str| format!("{NODE}\n{{\"at\": 5, \"cronjob\": {body}}}");
        let cases: Vec<(String, &str)> = vec![
            (
                cron(r#"{"name": "a/b", "schedule": "0 25 * * *", "images": ["x"]}"#),
                "line 2: \"cronjob.schedule\": invalid schedule \"0 25 * * *\": hour field \"25\": end of range (25) above maximum (23): 25",
            ),
            (
                cron(r#"{"name": "a/b", "schedule": "0 2 * *", "images": ["x"]}"#),
                "line 2: \"cronjob.schedule\": invalid schedule \"0 2 * *\": expected exactly 5 fields, found 4: [\"0\", \"2\", \"*\", \"*\"]",
            ),
            (
                cron(r#"{"name": "a/b", "schedule": 5, "images": ["x"]}"#),
                "line 2: \"cronjob.schedule\" must be a string",
            ),
            (
                cron(r#"{"name": "a/b", "images": ["x"]}"#),
                "line 2: missing \"cronjob.schedule\"",
            ),
            (
                cron(r#"{"name": "", "schedule": "@daily", "images": ["x"]}"#),
                "line 2: \"cronjob.name\" is empty",
            ),
            (
                cron(r#"{"name": "a/b", "schedule": "@daily", "images": []}"#),
                "line 2: \"cronjob.images\" names no image",
            ),
            (
                cron(r#"{"name": "a/b", "schedule": "@daily", "images": ["x", 3]}"#),
                "line 2: \"cronjob.images[1]\" must be a string",
            ),
            (
                cron(
                    r#"{"name": "a/b", "schedule": "@daily", "images": ["x"], "time_zone": "Mars/Olympus"}"#,
                ),
                "line 2: \"cronjob.time_zone\": unknown time zone Mars/Olympus",
            ),
            (
                cron(r#"{"name": "a/b", "schedule": "@daily", "images": ["x"], "suspend": "yes"}"#),
                "line 2: \"cronjob.suspend\" must be true or false",
            ),
            (
                cron(r#"{"name": "a/b", "schedule": "@daily", "images": ["x"], "concurrency": 1}"#),
                "line 2: unknown field \"concurrency\" in \"cronjob\" (expected \"name\", \"schedule\", \"time_zone\", \"suspend\", \"images\")",
            ),
            (
                format!("{NODE}\n{{\"at\": 5, \"bound\": {{\"pod\": \"a/b\"}}}}"),
                "line 2: missing \"bound.images\"",
            ),
            (
                format!(
                    "{NODE}\n{{\"at\": 5, \"bound\": {{\"pod\": \"a/b\", \"images\": \"x\"}}}}"
                ),
                "line 2: \"bound.images\" must be a list of image names",
            ),
            (
                format!(
                    "{NODE}\n{{\"at\": 5, \"rollout\": {{\"workload\": \"a/b\", \"images\": [\"x\"], \"previous\": [\"\"]}}}}"
                ),
                "line 2: \"rollout.previous[0]\" is empty",
            ),
            (
                format!("{NODE}\n{{\"at\": 5, \"rollout\": {{\"images\": [\"x\"]}}}}"),
                "line 2: missing \"rollout.workload\"",
            ),
            (
                NODE.replace(
                    "\"gc_period_s\": 300",
                    "\"gc_period_s\": 300, \"start_unix_s\": -1",
                ),
                "line 1: \"start_unix_s\" must be a whole number of seconds from 0 to 253402300799",
            ),
        ];
        for (text, want) in cases {
            let got = parse_workload(&text).expect_err(want).to_string();
            assert_eq!(got, want);
        }
        let many: Vec<String> = (0..=MAX_SIGNAL_IMAGES_TEST)
            .map(|i| format!("\"i{i}\""))
            .collect();
        let text = format!(
            "{NODE}\n{{\"at\": 5, \"bound\": {{\"pod\": \"a/b\", \"images\": [{}]}}}}",
            many.join(",")
        );
        let got = parse_workload(&text)
            .expect_err("too many images")
            .to_string();
        assert_eq!(
            got,
            "line 2: \"bound.images\" names 129 images, more than the 128 a line may"
        );
        // Each cron field broken in turn, with every kind of bad value: refused, line named.
        let good = ["0", "2", "1", "1", "0"];
        for field in 0..5 {
            for bad in [
                "", "-1", "99", "a", "1-", "*/0", "5-1", "1/2/3", "1,,2", "\u{e9}", "*-1",
            ] {
                let mut spec: Vec<&str> = good.to_vec();
                spec[field] = bad;
                let spec = spec.join(" ");
                let text = cron(&format!(
                    "{{\"name\": \"a/b\", \"schedule\": {}, \"images\": [\"x\"]}}",
                    serde_json::to_string(&spec).expect("a JSON string")
                ));
                let got = parse_workload(&text).expect_err(&spec).to_string();
                assert!(
                    got.starts_with("line 2: \"cronjob.schedule\": invalid schedule "),
                    "{spec:?}: {got}"
                );
            }
        }
    }

    const MAX_SIGNAL_IMAGES_TEST: usize = crate::gc::MAX_SIGNAL_IMAGES;

    #[test]
    fn bad_lines_are_refused_naming_the_line_and_the_reason() {
        let run = r#"{"at": 5, "run": {"image": "a", "size": 1, "for_s": 1}}"#;
        let cases: Vec<(String, &str)> = vec![
            (
                run.to_owned(),
                "line 1: the first line must be the \"node\" line",
            ),
            (
                format!("{NODE}\n{NODE}"),
                "line 2: the \"node\" line is given again: it comes once, first",
            ),
            (
                format!(
                    "{NODE}\n{{\"at\": 5, \"run\": {{\"image\": \"a\", \"size\": 1, \"for_s\": 1, \"cpu\": 2}}}}"
                ),
                "line 2: unknown field \"cpu\" in \"run\" (expected \"image\", \"size\", \"for_s\")",
            ),
            (
                format!("{NODE}\n{{\"at\": 5, \"pull\": {{}}}}"),
                "line 2: unknown operation \"pull\" (expected \"run\", \"restart\", \"cronjob\", \"bound\" or \"rollout\")",
            ),
            (
                format!("{NODE}\n{run}\n{{\"at\": 4, \"restart\": {{}}}}"),
                "line 3: \"at\" goes back in time (line 2 is later)",
            ),
            (
                format!("{NODE}\n{{\"at\": -1, \"restart\": {{}}}}"),
                "line 2: \"at\" must be between 0 and 315360000 seconds",
            ),
            (
                NODE.replace("\"high\": 85", "\"high\": 70"),
                "line 1: \"policy\": invalid configuration: imageGCLowThresholdPercent (--image-gc-low-threshold) 80 must be less than imageGCHighThresholdPercent (--image-gc-high-threshold) 70",
            ),
            (
                NODE.replace("\"gc_period_s\"", "\"gc_every\""),
                "line 1: unknown field \"gc_every\" on the node line (expected \"node\", \"policy\", \"gc_period_s\", \"start_unix_s\")",
            ),
            (
                format!("{NODE}\n{{\"at\": 5, \"restart\": {{\"hard\": true}}}}"),
                "line 2: unknown field \"hard\" in \"restart\" (it takes none)",
            ),
            (
                String::new(),
                "line 0: the workload is empty: it needs a \"node\" line",
            ),
            (
                format!("{NODE}\n{{\"at\": 5, \"at\": 9, \"restart\": {{}}}}"),
                "line 2: the key \"at\" is given twice in one object (column 14)",
            ),
            (
                format!(
                    "{NODE}\n{{\"at\": 5, \"run\": {{\"image\": \"a\", \"size\": 1, \"for_s\": 1, \"image\": \"b\"}}}}"
                ),
                "line 2: the key \"image\" is given twice in one object (column 62)",
            ),
            (
                NODE.replace(
                    "\"capacity\": 1000,",
                    "\"capacity\": 1000, \"capacity\": 9000,",
                ),
                "line 1: the key \"capacity\" is given twice in one object (column 47)",
            ),
        ];
        for (text, want) in cases {
            let got = parse_workload(&text).expect_err(want).to_string();
            assert_eq!(got, want);
        }
    }
}
