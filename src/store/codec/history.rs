//! The layouts of schema 4's pins and schema 5's histories: the pin key and value, the use
//! interval's key (open intervals first, then closed ones by start) and value, the pull
//! history's key (by time) and entry, and the warm table's position and row. As every layout
//! of the codec (see the parent module): a version byte first, canonical, decoded only through
//! the checked [`Reader`], so arbitrary bytes give an error or the one value that encodes to
//! exactly them, never a panic; keys are ordered so that byte order is the values' order.

use std::time::Duration;

use super::{
    Codec, DecodeError, LAYOUT_V1, MAX_ID_BYTES, OrderedCodec, Reader, from_ordered_i64,
    ordered_i64, record_key_parts, truncate_utf8, u32_len,
};
use crate::model::{
    ImagePin, MAX_IMAGE_NAME_BYTES, MAX_PIN_REASON_BYTES, PinKey, PullEntry, PullKey, PullOrigin,
    RecordKey, StoredWarmState, UnixNanos, UseInterval, UseKey, WarmRow,
};

// PinKey (schema 4): [1][image name][0x00][handler], as RecordKey: names never hold NUL (the
// store refuses them), so byte order is (name, handler) order.
impl Codec for PinKey {
    const TYPE_NAME: &'static str = "imagekeeper::PinKey";
    const FIXED_WIDTH: Option<usize> = None;

    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(2 + self.image.len() + self.runtime_handler.len());
        out.push(LAYOUT_V1);
        out.extend_from_slice(self.image.as_bytes());
        out.push(0);
        out.extend_from_slice(self.runtime_handler.as_bytes());
        out
    }

    fn decode(bytes: &[u8]) -> Result<PinKey, DecodeError> {
        let mut r = Reader::start("pin key", bytes)?;
        let Some(name_len) = r.bytes.iter().position(|&b| b == 0) else {
            return Err(DecodeError::Invalid {
                what: "pin key",
                field: "image name terminator",
            });
        };
        let total = bytes.len();
        let image = r.str(name_len, total, "image name")?;
        if image.is_empty() || image.len() > MAX_IMAGE_NAME_BYTES {
            return Err(DecodeError::Invalid {
                what: "pin key",
                field: "image name",
            });
        }
        r.take(1, total)?;
        let handler = r.rest_str("runtime handler")?;
        Ok(PinKey::new(image, handler))
    }
}
impl OrderedCodec for PinKey {}

// ImagePin (schema 4): [1][created_at i64][until i64][reason length u32][reason].
impl Codec for ImagePin {
    const TYPE_NAME: &'static str = "imagekeeper::ImagePin";
    const FIXED_WIDTH: Option<usize> = None;

    fn encode(&self) -> Vec<u8> {
        let reason = truncate_utf8(&self.reason, MAX_PIN_REASON_BYTES);
        let mut out = Vec::with_capacity(21 + reason.len());
        out.push(LAYOUT_V1);
        out.extend_from_slice(&self.created_at.0.to_be_bytes());
        out.extend_from_slice(&self.until.0.to_be_bytes());
        // `reason` is at most MAX_PIN_REASON_BYTES, far below u32::MAX.
        out.extend_from_slice(&(reason.len() as u32).to_be_bytes());
        out.extend_from_slice(reason.as_bytes());
        out
    }

    fn decode(bytes: &[u8]) -> Result<ImagePin, DecodeError> {
        let mut r = Reader::start("pin", bytes)?;
        let created_at = i64::from_be_bytes(r.array8(21)?);
        let until = i64::from_be_bytes(r.array8(21)?);
        let len = usize::try_from(r.u32(21)?).map_err(|_| DecodeError::Invalid {
            what: "pin",
            field: "reason length",
        })?;
        if len > MAX_PIN_REASON_BYTES {
            return Err(DecodeError::Invalid {
                what: "pin",
                field: "reason length",
            });
        }
        let total = 21 + len;
        let reason = r.str(len, total, "reason")?;
        r.finish(total)?;
        Ok(ImagePin {
            created_at: UnixNanos(created_at),
            until: UnixNanos(until),
            reason: reason.to_owned(),
        })
    }
}

// UseKey (schema 5): [1][closed u8: 0 open, 1 closed][started_at ordered][RecordKey layout]
impl Codec for UseKey {
    const TYPE_NAME: &'static str = "imagekeeper::UseKey";
    const FIXED_WIDTH: Option<usize> = None;

    fn encode(&self) -> Vec<u8> {
        let key = self.key.encode();
        let mut out = Vec::with_capacity(10 + key.len());
        out.push(LAYOUT_V1);
        out.push(u8::from(self.closed));
        out.extend_from_slice(&ordered_i64(self.started_at.0));
        out.extend_from_slice(&key);
        out
    }

    fn decode(bytes: &[u8]) -> Result<UseKey, DecodeError> {
        let (closed, started_at, (id, handler)) = use_key_borrowed(bytes)?;
        Ok(UseKey {
            closed,
            started_at,
            key: RecordKey::new(id, handler),
        })
    }
}
impl OrderedCodec for UseKey {}

/// A use key's fields, its record key borrowed: every check of `UseKey::decode`, which is this
/// and the record key's copies.
fn use_key_borrowed(bytes: &[u8]) -> Result<(bool, UnixNanos, (&str, &str)), DecodeError> {
    let mut r = Reader::start("use key", bytes)?;
    let closed = match r.take(1, 10)?[0] {
        0 => false,
        1 => true,
        _ => {
            return Err(DecodeError::Invalid {
                what: "use key",
                field: "closed flag",
            });
        }
    };
    let started_at = from_ordered_i64(r.array8(10)?);
    let key = record_key_parts(r.bytes)?;
    Ok((closed, UnixNanos(started_at), key))
}

/// The start of the use interval whose encoded key is `bytes`, the key checked as
/// `UseKey::decode` checks it, nothing allocated (the predictive walk's history read).
pub fn use_key_start(bytes: &[u8]) -> Result<UnixNanos, DecodeError> {
    use_key_borrowed(bytes).map(|(_, started_at, _)| started_at)
}

/// A pull key's fields, its record key borrowed: every check of `PullKey::decode`.
fn pull_key_borrowed(bytes: &[u8]) -> Result<(UnixNanos, (&str, &str)), DecodeError> {
    let mut r = Reader::start("pull key", bytes)?;
    let at = from_ordered_i64(r.array8(9)?);
    let key = record_key_parts(r.bytes)?;
    Ok((UnixNanos(at), key))
}

/// The time of the pull whose encoded key is `bytes`, the key checked as `PullKey::decode`
/// checks it, nothing allocated.
pub fn pull_key_at(bytes: &[u8]) -> Result<UnixNanos, DecodeError> {
    pull_key_borrowed(bytes).map(|(at, _)| at)
}

/// The encoded prefix of every open use interval's key (schema 5): the open intervals are the
/// range below [`closed_uses_prefix`].
pub fn closed_uses_prefix() -> Vec<u8> {
    vec![LAYOUT_V1, 1]
}

// UseInterval (schema 5): [1][last_seen i64]
impl Codec for UseInterval {
    const TYPE_NAME: &'static str = "imagekeeper::UseInterval";
    const FIXED_WIDTH: Option<usize> = Some(9);

    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(9);
        out.push(LAYOUT_V1);
        out.extend_from_slice(&self.last_seen.0.to_be_bytes());
        out
    }

    fn decode(bytes: &[u8]) -> Result<UseInterval, DecodeError> {
        let mut r = Reader::start("use interval", bytes)?;
        let last_seen = i64::from_be_bytes(r.array8(9)?);
        r.finish(9)?;
        Ok(UseInterval {
            last_seen: UnixNanos(last_seen),
        })
    }
}

// PullKey (schema 5): [1][at ordered][RecordKey layout]
impl Codec for PullKey {
    const TYPE_NAME: &'static str = "imagekeeper::PullKey";
    const FIXED_WIDTH: Option<usize> = None;

    fn encode(&self) -> Vec<u8> {
        let key = self.key.encode();
        let mut out = Vec::with_capacity(9 + key.len());
        out.push(LAYOUT_V1);
        out.extend_from_slice(&ordered_i64(self.at.0));
        out.extend_from_slice(&key);
        out
    }

    fn decode(bytes: &[u8]) -> Result<PullKey, DecodeError> {
        let (at, (id, handler)) = pull_key_borrowed(bytes)?;
        Ok(PullKey {
            at,
            key: RecordKey::new(id, handler),
        })
    }
}
impl OrderedCodec for PullKey {}

// PullEntry (schema 5): [1][size u64][origin u8: 0 pull, 1 warm, 2 restore, 3 detected]
// [took nanos u64][name length u32][name UTF-8, at most MAX_IMAGE_NAME_BYTES]
const PULL_FIXED: usize = 1 + 8 + 1 + 8 + 4;

impl Codec for PullEntry {
    const TYPE_NAME: &'static str = "imagekeeper::PullEntry";
    const FIXED_WIDTH: Option<usize> = None;

    fn encode(&self) -> Vec<u8> {
        let name = truncate_utf8(&self.name, MAX_IMAGE_NAME_BYTES);
        let mut out = Vec::with_capacity(PULL_FIXED + name.len());
        out.push(LAYOUT_V1);
        out.extend_from_slice(&self.size.to_be_bytes());
        out.push(match self.origin {
            PullOrigin::Pull => 0,
            PullOrigin::Warm => 1,
            PullOrigin::Restore => 2,
            PullOrigin::Detected => 3,
        });
        let took = u64::try_from(self.took.as_nanos()).unwrap_or(u64::MAX);
        out.extend_from_slice(&took.to_be_bytes());
        out.extend_from_slice(&u32_len(name.len()).to_be_bytes());
        out.extend_from_slice(name.as_bytes());
        out
    }

    fn decode(bytes: &[u8]) -> Result<PullEntry, DecodeError> {
        let mut r = Reader::start("pull", bytes)?;
        let size = u64::from_be_bytes(r.array8(PULL_FIXED)?);
        let origin = match r.take(1, PULL_FIXED)?[0] {
            0 => PullOrigin::Pull,
            1 => PullOrigin::Warm,
            2 => PullOrigin::Restore,
            3 => PullOrigin::Detected,
            _ => {
                return Err(DecodeError::Invalid {
                    what: "pull",
                    field: "origin",
                });
            }
        };
        let took = u64::from_be_bytes(r.array8(PULL_FIXED)?);
        let len = usize::try_from(r.u32(PULL_FIXED)?).map_err(|_| DecodeError::Invalid {
            what: "pull",
            field: "name length",
        })?;
        if len > MAX_IMAGE_NAME_BYTES {
            return Err(DecodeError::Invalid {
                what: "pull",
                field: "name length",
            });
        }
        let total = PULL_FIXED + len;
        let name = r.str(len, total, "name")?;
        r.finish(total)?;
        Ok(PullEntry {
            size,
            origin,
            took: Duration::from_nanos(took),
            name: name.to_owned(),
        })
    }
}

/// The key of a warm row (schema 5): the entry's position in the warm set, priority order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct WarmPosition(pub u32);

// WarmPosition: [1][position u32 BE]
impl Codec for WarmPosition {
    const TYPE_NAME: &'static str = "imagekeeper::WarmPosition";
    const FIXED_WIDTH: Option<usize> = Some(5);

    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(5);
        out.push(LAYOUT_V1);
        out.extend_from_slice(&self.0.to_be_bytes());
        out
    }

    fn decode(bytes: &[u8]) -> Result<WarmPosition, DecodeError> {
        let mut r = Reader::start("warm position", bytes)?;
        let position = r.u32(5)?;
        r.finish(5)?;
        Ok(WarmPosition(position))
    }
}
impl OrderedCodec for WarmPosition {}

// WarmRow (schema 5): [1][state u8: 0 present, 1 pulling, 2 queued, 3 does not fit, 4 failed,
// 5 expired][since i64][image length u32][image][handler length u32][handler]
// [image id length u32][image id]
const WARM_FIXED: usize = 1 + 1 + 8 + 4 + 4 + 4;

impl Codec for WarmRow {
    const TYPE_NAME: &'static str = "imagekeeper::WarmRow";
    const FIXED_WIDTH: Option<usize> = None;

    fn encode(&self) -> Vec<u8> {
        let image = truncate_utf8(&self.image, MAX_IMAGE_NAME_BYTES);
        let handler = truncate_utf8(&self.runtime_handler, MAX_IMAGE_NAME_BYTES);
        let id = truncate_utf8(&self.image_id, MAX_ID_BYTES);
        let mut out = Vec::with_capacity(WARM_FIXED + image.len() + handler.len() + id.len());
        out.push(LAYOUT_V1);
        out.push(match self.state {
            StoredWarmState::Present => 0,
            StoredWarmState::Pulling => 1,
            StoredWarmState::Queued => 2,
            StoredWarmState::DoesNotFit => 3,
            StoredWarmState::Failed => 4,
            StoredWarmState::Expired => 5,
        });
        out.extend_from_slice(&self.since.0.to_be_bytes());
        for s in [image, handler, id] {
            out.extend_from_slice(&u32_len(s.len()).to_be_bytes());
            out.extend_from_slice(s.as_bytes());
        }
        out
    }

    fn decode(bytes: &[u8]) -> Result<WarmRow, DecodeError> {
        let mut r = Reader::start("warm row", bytes)?;
        let total = bytes.len().max(WARM_FIXED);
        let state = match r.take(1, total)?[0] {
            0 => StoredWarmState::Present,
            1 => StoredWarmState::Pulling,
            2 => StoredWarmState::Queued,
            3 => StoredWarmState::DoesNotFit,
            4 => StoredWarmState::Failed,
            5 => StoredWarmState::Expired,
            _ => {
                return Err(DecodeError::Invalid {
                    what: "warm row",
                    field: "state",
                });
            }
        };
        let since = i64::from_be_bytes(r.array8(total)?);
        let mut strings: [String; 3] = Default::default();
        for (slot, (field, max)) in strings.iter_mut().zip([
            ("image", MAX_IMAGE_NAME_BYTES),
            ("runtime handler", MAX_IMAGE_NAME_BYTES),
            ("image id", MAX_ID_BYTES),
        ]) {
            let len = usize::try_from(r.u32(total)?).map_err(|_| DecodeError::Invalid {
                what: "warm row",
                field,
            })?;
            if len > max {
                return Err(DecodeError::Invalid {
                    what: "warm row",
                    field,
                });
            }
            *slot = r.str(len, total, field)?.to_owned();
        }
        r.finish(bytes.len())?;
        let [image, runtime_handler, image_id] = strings;
        if image.is_empty() {
            return Err(DecodeError::Invalid {
                what: "warm row",
                field: "image",
            });
        }
        Ok(WarmRow {
            image,
            runtime_handler,
            state,
            since: UnixNanos(since),
            image_id,
        })
    }
}
