//! The layouts of schema 6's `runtime_labels` table: the containerd image name the agent
//! labelled (the key) and what it wrote there ([`RuntimeLabel`]). As every layout of the codec
//! (see the parent module): a version byte first, canonical, decoded only through the checked
//! [`Reader`], so arbitrary bytes give an error or the one value that encodes to exactly them.

use super::{Codec, DecodeError, LAYOUT_V1, OrderedCodec, Reader, from_ordered_i64, ordered_i64};
use crate::model::{MAX_IMAGE_NAME_BYTES, MAX_RUNTIME_LABEL_VALUE_BYTES, RuntimeLabel, UnixNanos};

/// The key of a `runtime_labels` row: a containerd image name (namespace `k8s.io`), never
/// empty, at most [`MAX_IMAGE_NAME_BYTES`].
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct LabelledName(pub String);

// LabelledName: [1][name UTF-8], byte order is name order.
impl Codec for LabelledName {
    const TYPE_NAME: &'static str = "imagekeeper::LabelledName";
    const FIXED_WIDTH: Option<usize> = None;

    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(1 + self.0.len());
        out.push(LAYOUT_V1);
        out.extend_from_slice(self.0.as_bytes());
        out
    }

    fn decode(bytes: &[u8]) -> Result<LabelledName, DecodeError> {
        let mut r = Reader::start("labelled name", bytes)?;
        let name = r.rest_str("name")?;
        if name.is_empty() || name.len() > MAX_IMAGE_NAME_BYTES {
            return Err(DecodeError::Invalid {
                what: "labelled name",
                field: "name length",
            });
        }
        Ok(LabelledName(name.to_owned()))
    }
}
impl OrderedCodec for LabelledName {}

/// The fixed part of a [`RuntimeLabel`]: the version byte, `written_at`, the value's length.
const LABEL_FIXED: usize = 1 + 8 + 4;

// RuntimeLabel: [1][written_at i64, sign-flipped BE][value length u32 BE][value UTF-8]
impl Codec for RuntimeLabel {
    const TYPE_NAME: &'static str = "imagekeeper::RuntimeLabel";
    const FIXED_WIDTH: Option<usize> = None;

    fn encode(&self) -> Vec<u8> {
        let value = super::truncate_utf8(&self.value, MAX_RUNTIME_LABEL_VALUE_BYTES);
        let mut out = Vec::with_capacity(LABEL_FIXED + value.len());
        out.push(LAYOUT_V1);
        out.extend_from_slice(&ordered_i64(self.written_at.0));
        out.extend_from_slice(&super::u32_len(value.len()).to_be_bytes());
        out.extend_from_slice(value.as_bytes());
        out
    }

    fn decode(bytes: &[u8]) -> Result<RuntimeLabel, DecodeError> {
        let mut r = Reader::start("runtime label", bytes)?;
        let written_at = from_ordered_i64(r.array8(LABEL_FIXED)?);
        let len = usize::try_from(r.u32(LABEL_FIXED)?).unwrap_or(usize::MAX);
        if len > MAX_RUNTIME_LABEL_VALUE_BYTES {
            return Err(DecodeError::Invalid {
                what: "runtime label",
                field: "value length",
            });
        }
        let total = LABEL_FIXED + len;
        let value = r.str(len, total, "value")?;
        r.finish(total)?;
        Ok(RuntimeLabel {
            written_at: UnixNanos(written_at),
            value: value.to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_runtime_label_and_its_name_round_trip_and_bad_bytes_are_refused() {
        let label = RuntimeLabel {
            written_at: UnixNanos::from_secs(1_800_000_000),
            value: "pin".to_owned(),
        };
        let bytes = label.encode();
        assert_eq!(RuntimeLabel::decode(&bytes), Ok(label));
        assert!(RuntimeLabel::decode(&bytes[..bytes.len() - 1]).is_err());
        let mut long = bytes.clone();
        long.push(b'x');
        assert!(RuntimeLabel::decode(&long).is_err());
        let name = LabelledName("registry.k8s.io/pause:3.10".to_owned());
        assert_eq!(LabelledName::decode(&name.encode()), Ok(name));
        assert!(LabelledName::decode(&[LAYOUT_V1]).is_err(), "an empty name");
        assert!(
            LabelledName::decode(&[LAYOUT_V1, 0xff]).is_err(),
            "not UTF-8"
        );
    }
}
