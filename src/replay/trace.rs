//! The replay trace format: JSON lines, each an object with `"at"` (integer unix seconds or
//! RFC 3339) and exactly one operation key. A bad line is reported with its number and the
//! reason. A line is at most [`MAX_TRACE_LINE_BYTES`] (64 MiB, its line end not counted; the
//! `images` line of a node with 100,000 images is about 18 MB): a longer one is refused, naming
//! its number, after reading no more than the cap and one byte of it.
//!
//! [`TraceReader`] reads a trace one line at a time and never holds more than the current
//! line: each line is deserialized straight into a typed [`TraceOp`] (no `serde_json::Value`
//! tree). The replay command reads a trace twice, once to check every line and once to run
//! it, so nothing runs before the whole trace is checked and the trace is never held whole.
//! A line the typed path refuses is parsed again through `serde_json::Value` by the original
//! rules, which name the reason: so the reasons and their order of precedence are exactly
//! those of the format's first version, and a line the typed path might refuse while the
//! original rules accept it (a key given twice, last one wins) still parses as before.

use std::borrow::Cow;
use std::fmt;
use std::io::{BufRead, Read};
use std::marker::PhantomData;

use serde::Deserialize;
use serde::de::{self, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use crate::gc::GcPolicy;
use crate::model::{RuntimeContainer, RuntimeImage, UnixNanos};

mod rules;

use rules::{
    check_image_id, container, fs_fails, fs_op, image, parse_at, parse_line_by_value, policy,
};

/// One parsed trace line.
#[derive(Clone, Debug, PartialEq)]
pub struct TraceLine {
    /// 1-based line number in the trace.
    pub line: usize,
    /// The line's `at`: whole seconds since 1970 or RFC 3339, never before the line before.
    pub at: UnixNanos,
    /// What the line does.
    pub op: TraceOp,
}

/// What a trace line does.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum TraceOp {
    /// The runtime's images, and the inodes each one's removal frees (by image id, for those
    /// whose line gives `"inodes"`).
    Images(Vec<RuntimeImage>, ImageInodes),
    /// The runtime's containers from this line on.
    Containers(Vec<RuntimeContainer>),
    /// The image filesystem (and, until a `container_fs` line, the containers' too), with
    /// its (inodes, free inodes) when the line gives them.
    Fs {
        /// The filesystem's size in bytes.
        capacity: u64,
        /// Its free bytes.
        available: u64,
        /// Its (inodes, free inodes), when given.
        inodes: Option<(u64, u64)>,
    },
    /// A separate container filesystem from this line on (KEP-4191's split), with the
    /// fields of `fs`.
    ContainerFs {
        /// The filesystem's size in bytes.
        capacity: u64,
        /// Its free bytes.
        available: u64,
        /// Its (inodes, free inodes), when given.
        inodes: Option<(u64, u64)>,
    },
    /// The GC policy from this line on (the manager is built again with it, on the same
    /// store).
    Policy(GcPolicy),
    /// One detect at the line's time.
    Detect,
    /// One GarbageCollect at the line's time.
    Gc,
    /// One DeleteUnusedImages at the line's time.
    DeleteUnused,
    /// The agent restarts: the manager and the store are dropped and opened again on the
    /// same database.
    Restart,
    /// RemoveImage fails for these image ids from this line on (an empty list: it succeeds
    /// again).
    RemoveFails(Vec<String>),
    /// ImageFsInfo fails with this message from this line on (`None`: it answers again), as
    /// the kubelet's stats provider failing in TestGarbageCollectCadvisorFailure.
    FsFails(Option<String>),
    /// Words for the reader (what a trace ports and the outcome it expects); does nothing
    /// and prints nothing.
    Note(String),
}

/// The inodes each image's removal frees in the scripted runtime, by image id.
pub type ImageInodes = std::collections::BTreeMap<String, u64>;

/// A line that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {reason}")]
#[non_exhaustive]
pub struct TraceError {
    /// The 1-based line number.
    pub line: usize,
    /// What is wrong with it.
    pub reason: String,
}

/// Why reading a trace stopped: the trace could not be read (or is not UTF-8), or a line does
/// not parse.
#[derive(Debug, thiserror::Error)]
pub enum TraceReadError {
    /// The trace could not be read, or is not UTF-8.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// A line does not parse.
    #[error(transparent)]
    Line(#[from] TraceError),
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
    /// What the image's removal frees of the filesystem's inodes (scripted runtime).
    #[serde(default)]
    inodes: Option<u64>,
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
    #[serde(default)]
    inodes: Option<u64>,
    #[serde(default)]
    inodes_free: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PolicyLine {
    high: i64,
    low: i64,
    min_age_s: u64,
    max_age_s: u64,
    #[serde(default)]
    inodes_high: Option<i64>,
    #[serde(default)]
    inodes_low: Option<i64>,
    #[serde(default)]
    bytes_high: Option<u64>,
    #[serde(default)]
    bytes_low: Option<u64>,
}

const OPS: &[&str] = &[
    "images",
    "containers",
    "fs",
    "container_fs",
    "policy",
    "detect",
    "gc",
    "delete_unused",
    "restart",
    "remove_fails",
    "fs_fails",
    "note",
];

/// Parses a whole trace held in memory. Blank lines are skipped; times must not go backwards.
pub fn parse_trace(text: &str) -> Result<Vec<TraceLine>, TraceError> {
    let mut out = Vec::new();
    for line in TraceReader::new(text.as_bytes()) {
        match line {
            Ok(line) => out.push(line),
            Err(TraceReadError::Line(e)) => return Err(e),
            // A `&str` is UTF-8 and reading a slice cannot fail.
            Err(TraceReadError::Io(e)) => unreachable!("reading a &str: {e}"),
        }
    }
    Ok(out)
}

/// Reads every line of a trace and stops at the first that does not parse; returns how many
/// operations it holds. After a bad line it still reads the rest, so that a trace that is not
/// UTF-8 (or cannot be read) further on is reported as such, as when the whole trace was read
/// before parsing.
pub fn check_trace<R: BufRead>(reader: R) -> Result<usize, TraceReadError> {
    let mut lines = TraceReader::new(reader);
    let mut count = 0;
    while let Some(line) = lines.next() {
        match line {
            Ok(_) => count += 1,
            Err(TraceReadError::Line(e)) => {
                lines.drain_checking_utf8()?;
                return Err(TraceReadError::Line(e));
            }
            Err(io) => return Err(io),
        }
    }
    Ok(count)
}

/// A trace read one line at a time: yields each operation with its line number, or the first
/// error (after which it yields nothing). Blank lines are skipped; times must not go backwards.
/// Lines end at `\n`, and a `\r` before it is dropped (as `str::lines` splits).
pub struct TraceReader<R> {
    reader: R,
    buf: Vec<u8>,
    /// The longest line accepted ([`MAX_TRACE_LINE_BYTES`]; smaller in tests).
    max_line: usize,
    line: usize,
    /// The previous operation's line and time.
    prev: Option<(usize, UnixNanos)>,
    done: bool,
}

/// A line buffer grown past this is released after its line (a trace's one huge `images`
/// line need not stay allocated while the replay runs).
const KEEP_BUFFER_BYTES: usize = 1 << 20;

/// The longest trace line read, in bytes, without its line end (`\n` or `\r\n`): 64 MiB.
pub const MAX_TRACE_LINE_BYTES: usize = 64 << 20;

/// The most bytes of a trace that is not a regular file (a pipe or a device: `replay` cannot
/// read it twice, so it holds it in memory): as `simulate`'s workload cap. A larger trace is
/// given as a file, which is streamed.
pub const MAX_PIPED_TRACE_BYTES: u64 = 256 << 20;

/// `BufRead::read_until(b'\n', buf)`, with `buf` grown by a quarter of its capacity (or the
/// chunk, if larger) when full instead of doubled: a trace's `images` line of 18.9 MB at 100k
/// images took a 32 MiB buffer by doubling, the replay's peak (issue 40); a quarter wastes at
/// most a fifth of the line (a large block grows in place: `realloc` remaps its pages).
fn read_line_growing_by_a_quarter(
    reader: &mut impl BufRead,
    buf: &mut Vec<u8>,
) -> std::io::Result<usize> {
    let mut read = 0;
    loop {
        let chunk = match reader.fill_buf() {
            Ok(chunk) => chunk,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        let (take, done) = match chunk.iter().position(|&b| b == b'\n') {
            Some(end) => (end + 1, true),
            None => (chunk.len(), chunk.is_empty()),
        };
        if buf.capacity() - buf.len() < take {
            buf.reserve_exact(take.max(buf.capacity() / 4));
        }
        buf.extend_from_slice(&chunk[..take]);
        reader.consume(take);
        read += take;
        if done {
            return Ok(read);
        }
    }
}

impl<R: BufRead> TraceReader<R> {
    /// A reader of `reader`'s lines, each at most [`MAX_TRACE_LINE_BYTES`].
    pub fn new(reader: R) -> TraceReader<R> {
        TraceReader::with_max_line(reader, MAX_TRACE_LINE_BYTES)
    }

    fn with_max_line(reader: R, max_line: usize) -> TraceReader<R> {
        TraceReader {
            reader,
            buf: Vec::new(),
            max_line,
            line: 0,
            prev: None,
            done: false,
        }
    }

    fn read_next(&mut self) -> Result<Option<TraceLine>, TraceReadError> {
        loop {
            self.buf.clear();
            if self.buf.capacity() > KEEP_BUFFER_BYTES {
                self.buf = Vec::new();
            }
            // At most the cap, its line end (`\r\n`) and one byte more: enough to tell a line
            // over the cap, never the rest of it.
            let most = u64::try_from(self.max_line.saturating_add(3)).unwrap_or(u64::MAX);
            if read_line_growing_by_a_quarter(&mut (&mut self.reader).take(most), &mut self.buf)?
                == 0
            {
                return Ok(None);
            }
            self.line += 1;
            let line = self.line;
            let content = match self.buf.strip_suffix(b"\n") {
                Some(rest) => rest.strip_suffix(b"\r").unwrap_or(rest),
                None => &self.buf[..],
            };
            if content.len() > self.max_line {
                return Err(TraceError {
                    line,
                    reason: format!(
                        "the line is longer than {} bytes, the most a trace line may hold",
                        self.max_line
                    ),
                }
                .into());
            }
            // As `read_line` refused it: the trace must be UTF-8.
            let raw = std::str::from_utf8(content).map_err(|_| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    "stream did not contain valid UTF-8",
                )
            })?;
            if raw.trim().is_empty() {
                continue;
            }
            let (at, op) = parse_line(raw).map_err(|reason| TraceError { line, reason })?;
            if let Some((prev_line, _)) = self.prev.filter(|(_, prev_at)| at < *prev_at) {
                return Err(TraceError {
                    line,
                    reason: format!("\"at\" goes back in time (line {prev_line} is later)"),
                }
                .into());
            }
            self.prev = Some((line, at));
            return Ok(Some(TraceLine { line, at, op }));
        }
    }

    /// Reads the rest of the input, checking only that it is UTF-8 and readable: in the
    /// reader's own chunks (a character cut at a chunk's end is carried to the next), so it
    /// holds no line, however long.
    fn drain_checking_utf8(&mut self) -> Result<(), std::io::Error> {
        let invalid = || {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "stream did not contain valid UTF-8",
            )
        };
        let mut carry: Vec<u8> = Vec::new();
        loop {
            let chunk = self.reader.fill_buf()?;
            if chunk.is_empty() {
                return if carry.is_empty() {
                    Ok(())
                } else {
                    Err(invalid())
                };
            }
            let n = chunk.len();
            carry.extend_from_slice(chunk);
            self.reader.consume(n);
            match std::str::from_utf8(&carry) {
                Ok(_) => carry.clear(),
                // Only an incomplete character at the end: its bytes wait for the next chunk.
                Err(e) if e.error_len().is_none() => {
                    carry.drain(..e.valid_up_to());
                }
                Err(_) => return Err(invalid()),
            }
        }
    }
}

impl<R: BufRead> Iterator for TraceReader<R> {
    type Item = Result<TraceLine, TraceReadError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        match self.read_next() {
            Ok(Some(line)) => Some(Ok(line)),
            Ok(None) => {
                self.done = true;
                None
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

/// One line: the typed path, and on any refusal the original rules (which name the reason,
/// or accept a line the typed path is stricter about).
fn parse_line(raw: &str) -> Result<(UnixNanos, TraceOp), String> {
    match serde_json::from_str::<TypedLine>(raw) {
        Ok(TypedLine { at, op }) => match parse_at(&at) {
            Ok(at) => Ok((at, op)),
            Err(_) => parse_line_by_value(raw),
        },
        Err(_) => parse_line_by_value(raw),
    }
}

// ------------------------------------------------------------------------------ typed path

/// A line deserialized straight from its text. Stricter than the original rules in one way:
/// a key given twice is refused (the original rules keep the last), and then the line is
/// parsed by those rules.
struct TypedLine {
    /// `"at"` as written: a number or a string, at most a few bytes.
    at: Value,
    op: TraceOp,
}

impl<'de> Deserialize<'de> for TypedLine {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(TypedLineVisitor)
    }
}

struct TypedLineVisitor;

impl<'de> Visitor<'de> for TypedLineVisitor {
    type Value = TypedLine;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a trace line: an object with \"at\" and one operation")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<TypedLine, A::Error> {
        let mut at: Option<Value> = None;
        let mut op: Option<TraceOp> = None;
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            if key == "at" {
                if at.is_some() {
                    return Err(de::Error::custom("\"at\" given twice"));
                }
                at = Some(map.next_value()?);
                continue;
            }
            if op.is_some() {
                return Err(de::Error::custom("more than one operation"));
            }
            op = Some(match &*key {
                "images" => {
                    let ImagesBody(images, inodes) = map.next_value()?;
                    TraceOp::Images(images, inodes)
                }
                "containers" => TraceOp::Containers(map.next_value::<ContainersBody>()?.0),
                "fs" => fs_op(map.next_value()?, false).map_err(de::Error::custom)?,
                "container_fs" => fs_op(map.next_value()?, true).map_err(de::Error::custom)?,
                "policy" => TraceOp::Policy(
                    policy(map.next_value::<PolicyLine>()?).map_err(de::Error::custom)?,
                ),
                "detect" => {
                    map.next_value::<EmptyObject>()?;
                    TraceOp::Detect
                }
                "gc" => {
                    map.next_value::<EmptyObject>()?;
                    TraceOp::Gc
                }
                "delete_unused" => {
                    map.next_value::<EmptyObject>()?;
                    TraceOp::DeleteUnused
                }
                "restart" => {
                    map.next_value::<EmptyObject>()?;
                    TraceOp::Restart
                }
                "remove_fails" => {
                    let ids: Vec<String> = map.next_value()?;
                    for id in &ids {
                        check_image_id(id, "\"remove_fails\" entry").map_err(de::Error::custom)?;
                    }
                    TraceOp::RemoveFails(ids)
                }
                "fs_fails" => {
                    TraceOp::FsFails(fs_fails(map.next_value()?).map_err(de::Error::custom)?)
                }
                "note" => TraceOp::Note(map.next_value()?),
                _ => return Err(de::Error::custom("unknown operation")),
            });
        }
        match (at, op) {
            (Some(at), Some(op)) => Ok(TypedLine { at, op }),
            _ => Err(de::Error::custom("missing \"at\" or the operation")),
        }
    }
}

/// An `images` body: each entry checked and converted as it is read, so the list is held
/// once, as the runtime's images, and the inodes of those whose line gives them. The list
/// and each image's tags are held at their exact length (no growth's spare room: the
/// scripted runtime keeps them for the whole replay).
struct ImagesBody(Vec<RuntimeImage>, ImageInodes);

impl<'de> Deserialize<'de> for ImagesBody {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_seq(ImagesVisitor)
    }
}

struct ImagesVisitor;

impl<'de> Visitor<'de> for ImagesVisitor {
    type Value = ImagesBody;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a sequence")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<ImagesBody, A::Error> {
        let mut images = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
        let mut inodes = ImageInodes::new();
        while let Some(item) = seq.next_element::<ImageLine>()? {
            let (image, n) = image(item).map_err(de::Error::custom)?;
            if let Some(n) = n {
                inodes.insert(image.id.0.clone(), n);
            }
            images.push(image);
        }
        images.shrink_to_fit();
        Ok(ImagesBody(images, inodes))
    }
}

/// A `containers` body, converted as it is read.
struct ContainersBody(Vec<RuntimeContainer>);

impl<'de> Deserialize<'de> for ContainersBody {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer
            .deserialize_seq(ConvertingSeq(container, PhantomData))
            .map(ContainersBody)
    }
}

/// A sequence of `T` (as the trace writes it), each turned into `U` by `F` as it is read.
struct ConvertingSeq<T, U, F>(F, PhantomData<fn(T) -> U>);

impl<'de, T, U, F> Visitor<'de> for ConvertingSeq<T, U, F>
where
    T: Deserialize<'de>,
    F: Fn(T) -> Result<U, String>,
{
    type Value = Vec<U>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a sequence")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<U>, A::Error> {
        let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
        while let Some(item) = seq.next_element::<T>()? {
            out.push((self.0)(item).map_err(de::Error::custom)?);
        }
        Ok(out)
    }
}

/// `{}` and nothing else.
struct EmptyObject;

impl<'de> Deserialize<'de> for EmptyObject {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(EmptyObjectVisitor)
    }
}

struct EmptyObjectVisitor;

impl<'de> Visitor<'de> for EmptyObjectVisitor {
    type Value = EmptyObject;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an empty object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<EmptyObject, A::Error> {
        match map.next_key::<IgnoredAny>()? {
            None => Ok(EmptyObject),
            Some(_) => Err(de::Error::custom("not an empty object")),
        }
    }
}

#[cfg(test)]
mod tests;
