//! The byte layouts of everything the store keeps, written by hand: no serde, no bincode.
//!
//! Every layout starts with a version byte (`LAYOUT_V1`), is canonical (exactly one byte
//! string per value) and is checked at the boundary: [`Codec::decode`] of arbitrary bytes
//! returns an error or the one value whose [`Codec::encode`] is exactly those bytes, never a
//! panic and never a different value. Times in keys are order-preserving big-endian (the sign
//! bit flipped), so comparing encoded keys byte by byte orders them by value; the eviction key
//! therefore sorts by (last_used, first_detected, record key). This module knows nothing of
//! redb: `tables.rs` adapts it to redb's `Key`/`Value` traits. It holds the checked reader
//! and schema 1's layouts (records, the eviction keys, backoff, meta); schema 2's journal and
//! names are `codec/journal.rs`, schema 4's pins and schema 5's histories `codec/history.rs`, schema 6's runtime labels
//! `codec/runtime_labels.rs`, schema 7's signals `codec/signals.rs`.

use std::time::Duration;

use crate::model::{BackoffEntry, ImageId, ImageRecord, RecordKey, UnixNanos};

mod history;
mod journal;
mod runtime_labels;
mod signals;

pub use history::{WarmPosition, closed_uses_prefix, pull_key_at, use_key_start};
pub use journal::JournalKey;
pub(crate) use journal::names_equal_encoded;
pub use runtime_labels::LabelledName;
pub use signals::SignalKey;

/// The version byte every layout of schema 1 starts with.
pub const LAYOUT_V1: u8 = 1;

/// Why bytes did not decode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    #[error("{what}: empty input")]
    /// No bytes at all.
    Empty {
        /// What was decoded.
        what: &'static str,
    },
    #[error("{what}: unknown layout version {version}")]
    /// A layout version this build does not know.
    UnknownVersion {
        /// What was decoded.
        what: &'static str,
        /// The version byte.
        version: u8,
    },
    #[error("{what}: expected {expected} bytes, found {found}")]
    /// The wrong number of bytes.
    Length {
        /// What was decoded.
        what: &'static str,
        /// Bytes expected.
        expected: usize,
        /// Bytes found.
        found: usize,
    },
    #[error("{what}: {field} is not valid UTF-8")]
    /// A text field that is not UTF-8.
    Utf8 {
        /// What was decoded.
        what: &'static str,
        /// The field.
        field: &'static str,
    },
    #[error("{what}: invalid {field}")]
    /// A field's value is out of its range.
    Invalid {
        /// What was decoded.
        what: &'static str,
        /// The field.
        field: &'static str,
    },
}

/// A value with a hand-written, versioned byte layout.
pub trait Codec: Sized + std::fmt::Debug {
    /// The redb type name; part of the file format.
    const TYPE_NAME: &'static str;
    /// The encoded width when every value has the same width.
    const FIXED_WIDTH: Option<usize>;
    /// The value's bytes in its layout (what [`Codec::decode`] reads back).
    fn encode(&self) -> Vec<u8>;
    /// The value `bytes` encode: an error for any input that is not exactly one value's
    /// encoding, never a panic (`fuzz/fuzz_targets/decode.rs` holds it to that).
    fn decode(bytes: &[u8]) -> Result<Self, DecodeError>;
}

/// Marks layouts whose byte order is the order of the values, so they can be redb keys.
pub trait OrderedCodec: Codec {}

/// One row of the eviction index: the fields GC orders by, then the record's key.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct EvictionKey {
    /// When the image was last used.
    pub last_used: UnixNanos,
    /// When it was first detected.
    pub first_detected: UnixNanos,
    /// The record's key.
    pub key: RecordKey,
}

impl EvictionKey {
    /// The index row of `record` under `key`.
    pub fn of(key: &RecordKey, record: &ImageRecord) -> EvictionKey {
        EvictionKey {
            last_used: record.last_used,
            first_detected: record.first_detected,
            key: key.clone(),
        }
    }

    /// The encoded prefix shared by every key with this `last_used`: an exclusive upper
    /// bound for "last_used < bound" range scans.
    pub fn last_used_prefix(last_used: UnixNanos) -> Vec<u8> {
        let mut out = Vec::with_capacity(9);
        out.push(LAYOUT_V1);
        out.extend_from_slice(&ordered_i64(last_used.0));
        out
    }
}

/// The key of a backoff entry: `<pod uid>_<image>`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct BackoffKey(pub String);

/// The name of a meta entry.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct MetaKey(pub String);

/// The value of a meta entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MetaValue(pub i64);

fn ordered_i64(v: i64) -> [u8; 8] {
    ((v as u64) ^ (1 << 63)).to_be_bytes()
}

fn from_ordered_i64(b: [u8; 8]) -> i64 {
    (u64::from_be_bytes(b) ^ (1 << 63)) as i64
}

/// A cursor over input bytes that fails instead of panicking.
struct Reader<'a> {
    what: &'static str,
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    /// Starts reading `bytes`, checking the version byte.
    fn start(what: &'static str, bytes: &'a [u8]) -> Result<Reader<'a>, DecodeError> {
        let (&version, rest) = bytes.split_first().ok_or(DecodeError::Empty { what })?;
        if version != LAYOUT_V1 {
            return Err(DecodeError::UnknownVersion { what, version });
        }
        Ok(Reader { what, bytes: rest })
    }

    fn take(&mut self, n: usize, total: usize) -> Result<&'a [u8], DecodeError> {
        if self.bytes.len() < n {
            return Err(DecodeError::Length {
                what: self.what,
                expected: total,
                found: total.saturating_sub(n).saturating_add(self.bytes.len()),
            });
        }
        let (head, tail) = self.bytes.split_at(n);
        self.bytes = tail;
        Ok(head)
    }

    fn array8(&mut self, total: usize) -> Result<[u8; 8], DecodeError> {
        let mut out = [0u8; 8];
        out.copy_from_slice(self.take(8, total)?);
        Ok(out)
    }

    fn u32(&mut self, total: usize) -> Result<u32, DecodeError> {
        let b = self.take(4, total)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn str(&mut self, n: usize, total: usize, field: &'static str) -> Result<&'a str, DecodeError> {
        let bytes = self.take(n, total)?;
        std::str::from_utf8(bytes).map_err(|_| DecodeError::Utf8 {
            what: self.what,
            field,
        })
    }

    fn rest_str(&mut self, field: &'static str) -> Result<&'a str, DecodeError> {
        let n = self.bytes.len();
        self.str(n, n, field)
    }

    fn finish(self, expected: usize) -> Result<(), DecodeError> {
        if self.bytes.is_empty() {
            Ok(())
        } else {
            Err(DecodeError::Length {
                what: self.what,
                expected,
                found: expected + self.bytes.len(),
            })
        }
    }
}

// RecordKey: [1][id][0x00][handler]. Ids never hold NUL (the store refuses them), so the
// first NUL ends the id and byte order is (id, handler) order.
impl Codec for RecordKey {
    const TYPE_NAME: &'static str = "imagekeeper::RecordKey";
    const FIXED_WIDTH: Option<usize> = None;

    fn encode(&self) -> Vec<u8> {
        let id = self.image_id.as_str().as_bytes();
        let mut out = Vec::with_capacity(2 + id.len() + self.runtime_handler.len());
        out.push(LAYOUT_V1);
        out.extend_from_slice(id);
        out.push(0);
        out.extend_from_slice(self.runtime_handler.as_bytes());
        out
    }

    fn decode(bytes: &[u8]) -> Result<RecordKey, DecodeError> {
        let (id, handler) = record_key_parts(bytes)?;
        Ok(RecordKey {
            image_id: ImageId::new(id),
            runtime_handler: handler.to_owned(),
        })
    }
}
impl OrderedCodec for RecordKey {}

/// A record key's (image id, runtime handler) borrowed from its encoding, checked exactly as
/// [`RecordKey`]'s `decode` checks it (which calls this): the same error for the same bytes,
/// without allocating. Walks that only compare keys (detect's names walk) read keys so.
pub(crate) fn record_key_parts(bytes: &[u8]) -> Result<(&str, &str), DecodeError> {
    let mut r = Reader::start("record key", bytes)?;
    let Some(id_len) = r.bytes.iter().position(|&b| b == 0) else {
        return Err(DecodeError::Invalid {
            what: "record key",
            field: "image id terminator",
        });
    };
    let total = bytes.len();
    let id = r.str(id_len, total, "image id")?;
    if id.is_empty() || id.len() > MAX_ID_BYTES {
        return Err(DecodeError::Invalid {
            what: "record key",
            field: "image id",
        });
    }
    r.take(1, total)?;
    let handler = r.rest_str("runtime handler")?;
    Ok((id, handler))
}

// ImageRecord: [1][first_detected i64][last_used i64][size u64][flags u8: bit 0 pinned]
const RECORD_WIDTH: usize = 1 + 8 + 8 + 8 + 1;

impl Codec for ImageRecord {
    const TYPE_NAME: &'static str = "imagekeeper::ImageRecord";
    const FIXED_WIDTH: Option<usize> = Some(RECORD_WIDTH);

    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(RECORD_WIDTH);
        out.push(LAYOUT_V1);
        out.extend_from_slice(&self.first_detected.0.to_be_bytes());
        out.extend_from_slice(&self.last_used.0.to_be_bytes());
        out.extend_from_slice(&self.size.to_be_bytes());
        out.push(u8::from(self.pinned));
        out
    }

    fn decode(bytes: &[u8]) -> Result<ImageRecord, DecodeError> {
        let mut r = Reader::start("image record", bytes)?;
        if bytes.len() != RECORD_WIDTH {
            return Err(DecodeError::Length {
                what: "image record",
                expected: RECORD_WIDTH,
                found: bytes.len(),
            });
        }
        let first_detected = i64::from_be_bytes(r.array8(RECORD_WIDTH)?);
        let last_used = i64::from_be_bytes(r.array8(RECORD_WIDTH)?);
        let size = u64::from_be_bytes(r.array8(RECORD_WIDTH)?);
        let flags = r.take(1, RECORD_WIDTH)?[0];
        r.finish(RECORD_WIDTH)?;
        let pinned = match flags {
            0 => false,
            1 => true,
            _ => {
                return Err(DecodeError::Invalid {
                    what: "image record",
                    field: "flags",
                });
            }
        };
        Ok(ImageRecord {
            first_detected: UnixNanos(first_detected),
            last_used: UnixNanos(last_used),
            size,
            pinned,
        })
    }
}

// EvictionKey: [1][last_used ordered][first_detected ordered][RecordKey layout]
impl Codec for EvictionKey {
    const TYPE_NAME: &'static str = "imagekeeper::EvictionKey";
    const FIXED_WIDTH: Option<usize> = None;

    fn encode(&self) -> Vec<u8> {
        let key = self.key.encode();
        let mut out = Vec::with_capacity(17 + key.len());
        out.push(LAYOUT_V1);
        out.extend_from_slice(&ordered_i64(self.last_used.0));
        out.extend_from_slice(&ordered_i64(self.first_detected.0));
        out.extend_from_slice(&key);
        out
    }

    fn decode(bytes: &[u8]) -> Result<EvictionKey, DecodeError> {
        let mut r = Reader::start("eviction key", bytes)?;
        let last_used = from_ordered_i64(r.array8(17)?);
        let first_detected = from_ordered_i64(r.array8(17)?);
        let key = RecordKey::decode(r.bytes)?;
        Ok(EvictionKey {
            last_used: UnixNanos(last_used),
            first_detected: UnixNanos(first_detected),
            key,
        })
    }
}
impl OrderedCodec for EvictionKey {}

/// How many leading bytes of a record key's encoding schema 3's eviction index keeps.
pub const INDEX_KEY_PREFIX_BYTES: usize = 16;
const INDEX_KEY_WIDTH: usize = 1 + 8 + 8 + INDEX_KEY_PREFIX_BYTES;

/// Schema 3's eviction-index row: (last_used, first_detected, the first
/// `INDEX_KEY_PREFIX_BYTES` (16) bytes of the record key's encoding, zero-padded), 33 bytes
/// instead of the 90 of an [`EvictionKey`] with a whole sha256 id. Records that share all
/// three share one row. The prefix only grows with the key (a longer key never sorts before a
/// shorter one's prefix), so rows in byte order, each followed by the records it stands for
/// in key order, give exactly the (last_used, first_detected, key) order of [`EvictionKey`].
/// The records of a row are found by a short range scan of `images` from
/// [`IndexKey::scan_start`], the keys whose padded prefix is the row's being contiguous.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct IndexKey {
    /// The record's last_used.
    pub last_used: UnixNanos,
    /// The record's first_detected.
    pub first_detected: UnixNanos,
    /// The record key's encoding's first bytes, zero-padded.
    pub prefix: [u8; INDEX_KEY_PREFIX_BYTES],
}

/// The first [`INDEX_KEY_PREFIX_BYTES`] bytes of an encoded record key, zero-padded.
pub fn key_prefix(encoded_key: &[u8]) -> [u8; INDEX_KEY_PREFIX_BYTES] {
    let mut out = [0u8; INDEX_KEY_PREFIX_BYTES];
    let n = encoded_key.len().min(INDEX_KEY_PREFIX_BYTES);
    out[..n].copy_from_slice(&encoded_key[..n]);
    out
}

impl IndexKey {
    /// The row of the record whose encoded key is `encoded_key`.
    pub fn of_encoded(encoded_key: &[u8], record: &ImageRecord) -> IndexKey {
        IndexKey {
            last_used: record.last_used,
            first_detected: record.first_detected,
            prefix: key_prefix(encoded_key),
        }
    }

    /// The row of `key`'s record.
    pub fn of(key: &RecordKey, record: &ImageRecord) -> IndexKey {
        IndexKey::of_encoded(&key.encode(), record)
    }

    /// The row a resumed walk starts at: the one that holds `after`'s record.
    pub fn of_eviction_key(after: &EvictionKey) -> IndexKey {
        IndexKey {
            last_used: after.last_used,
            first_detected: after.first_detected,
            prefix: key_prefix(&after.key.encode()),
        }
    }

    /// An encoded record key at or before every key whose padded prefix is this row's (the
    /// prefix without its zero padding).
    pub fn scan_start(&self) -> &[u8] {
        let end = self
            .prefix
            .iter()
            .rposition(|&b| b != 0)
            .map_or(0, |i| i + 1);
        &self.prefix[..end]
    }

    /// Whether `record` has this row's times.
    pub fn matches(&self, record: &ImageRecord) -> bool {
        record.last_used == self.last_used && record.first_detected == self.first_detected
    }
}

impl std::fmt::Display for IndexKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let prefix = String::from_utf8_lossy(self.scan_start());
        write!(
            f,
            "({}, {}, {:?})",
            self.last_used.0,
            self.first_detected.0,
            prefix.trim_start_matches('\u{1}')
        )
    }
}

// IndexKey: [1][last_used][first_detected][16-byte key prefix], fixed width.
impl Codec for IndexKey {
    const TYPE_NAME: &'static str = "imagekeeper::IndexKey";
    const FIXED_WIDTH: Option<usize> = Some(INDEX_KEY_WIDTH);

    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(INDEX_KEY_WIDTH);
        out.push(LAYOUT_V1);
        out.extend_from_slice(&ordered_i64(self.last_used.0));
        out.extend_from_slice(&ordered_i64(self.first_detected.0));
        out.extend_from_slice(&self.prefix);
        out
    }

    fn decode(bytes: &[u8]) -> Result<IndexKey, DecodeError> {
        let mut r = Reader::start("eviction index key", bytes)?;
        let last_used = from_ordered_i64(r.array8(INDEX_KEY_WIDTH)?);
        let first_detected = from_ordered_i64(r.array8(INDEX_KEY_WIDTH)?);
        let mut prefix = [0u8; INDEX_KEY_PREFIX_BYTES];
        prefix.copy_from_slice(r.take(INDEX_KEY_PREFIX_BYTES, INDEX_KEY_WIDTH)?);
        r.finish(INDEX_KEY_WIDTH)?;
        Ok(IndexKey {
            last_used: UnixNanos(last_used),
            first_detected: UnixNanos(first_detected),
            prefix,
        })
    }
}
impl OrderedCodec for IndexKey {}

// BackoffKey and MetaKey: [1][UTF-8]
impl Codec for BackoffKey {
    const TYPE_NAME: &'static str = "imagekeeper::BackoffKey";
    const FIXED_WIDTH: Option<usize> = None;

    fn encode(&self) -> Vec<u8> {
        tagged_str(&self.0)
    }

    fn decode(bytes: &[u8]) -> Result<BackoffKey, DecodeError> {
        let mut r = Reader::start("backoff key", bytes)?;
        Ok(BackoffKey(r.rest_str("key")?.to_owned()))
    }
}
impl OrderedCodec for BackoffKey {}

impl Codec for MetaKey {
    const TYPE_NAME: &'static str = "imagekeeper::MetaKey";
    const FIXED_WIDTH: Option<usize> = None;

    fn encode(&self) -> Vec<u8> {
        tagged_str(&self.0)
    }

    fn decode(bytes: &[u8]) -> Result<MetaKey, DecodeError> {
        let mut r = Reader::start("meta key", bytes)?;
        Ok(MetaKey(r.rest_str("name")?.to_owned()))
    }
}
impl OrderedCodec for MetaKey {}

fn tagged_str(s: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(1 + s.len());
    out.push(LAYOUT_V1);
    out.extend_from_slice(s.as_bytes());
    out
}

// MetaValue: [1][i64]
impl Codec for MetaValue {
    const TYPE_NAME: &'static str = "imagekeeper::MetaValue";
    const FIXED_WIDTH: Option<usize> = Some(9);

    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(9);
        out.push(LAYOUT_V1);
        out.extend_from_slice(&self.0.to_be_bytes());
        out
    }

    fn decode(bytes: &[u8]) -> Result<MetaValue, DecodeError> {
        let mut r = Reader::start("meta value", bytes)?;
        let v = i64::from_be_bytes(r.array8(9)?);
        r.finish(9)?;
        Ok(MetaValue(v))
    }
}

// BackoffEntry: [1][backoff nanos u64][last_update i64][u32 message length][message]
impl Codec for BackoffEntry {
    const TYPE_NAME: &'static str = "imagekeeper::BackoffEntry";
    const FIXED_WIDTH: Option<usize> = None;

    fn encode(&self) -> Vec<u8> {
        let nanos = u64::try_from(self.backoff.as_nanos()).unwrap_or(u64::MAX);
        let msg = truncate_utf8(&self.last_error, MAX_ERROR_BYTES);
        let mut out = Vec::with_capacity(21 + msg.len());
        out.push(LAYOUT_V1);
        out.extend_from_slice(&nanos.to_be_bytes());
        out.extend_from_slice(&self.last_update.0.to_be_bytes());
        // `msg` is at most MAX_ERROR_BYTES, far below u32::MAX.
        out.extend_from_slice(&(msg.len() as u32).to_be_bytes());
        out.extend_from_slice(msg.as_bytes());
        out
    }

    fn decode(bytes: &[u8]) -> Result<BackoffEntry, DecodeError> {
        let mut r = Reader::start("backoff entry", bytes)?;
        let nanos = u64::from_be_bytes(r.array8(21)?);
        let last_update = i64::from_be_bytes(r.array8(21)?);
        let len_bytes = r.take(4, 21)?;
        let len = u32::from_be_bytes([len_bytes[0], len_bytes[1], len_bytes[2], len_bytes[3]]);
        let len = usize::try_from(len).map_err(|_| DecodeError::Invalid {
            what: "backoff entry",
            field: "message length",
        })?;
        if len > MAX_ERROR_BYTES {
            return Err(DecodeError::Invalid {
                what: "backoff entry",
                field: "message length",
            });
        }
        let total = 21 + len;
        let msg = r.str(len, total, "message")?;
        r.finish(total)?;
        Ok(BackoffEntry {
            backoff: Duration::from_nanos(nanos),
            last_update: UnixNanos(last_update),
            last_error: msg.to_owned(),
        })
    }
}

/// A length as the u32 of a layout. Lists and names larger than 4 GiB cannot reach the store
/// (a runtime's gRPC message is far smaller); they would be cut off, never wrap.
fn u32_len(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// The longest image id a record key can hold.
pub const MAX_ID_BYTES: usize = u16::MAX as usize;

/// Error messages kept with a backoff entry are cut to this many bytes.
pub const MAX_ERROR_BYTES: usize = 4096;

fn truncate_utf8(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
mod tests;
