//! ListImagesResponse decoded into an [`ImageList`] that keeps the response's own bytes: the
//! client's ListImages (`ListImagesCodec`) takes the message's bytes from tonic's buffer
//! without a copy and records, per image, where its id, runtime handler and names lie in
//! them. At 100k images the agent then holds the response and about 50 bytes an image of
//! index, not the response beside a second copy of every string (and never the generated
//! `proto::Image`s, whose ImageSpec, uid and username imagekeeper does not keep).
//!
//! Invariants: the decode yields exactly the images the generated decode followed by
//! `convert::image_from_proto` yields, for every input, unknown fields and repeated
//! occurrences of a field included (a repeated scalar: the last wins; a repeated `spec`:
//! merged, as protobuf merges messages), and fails exactly when the generated decode fails
//! (the fields it drops are still decoded and checked, with prost's own field decoders where
//! it keeps no value, and as prost checks them where it keeps a span).

use std::collections::HashMap;
use std::fmt;

use bytes::{Buf, Bytes};
use prost::DecodeError;
use prost::encoding::{
    DecodeContext, WireType, bool as pbool, check_wire_type, decode_key, decode_varint, hash_map,
    message, skip_field, string, uint64,
};
use tonic::Status;
use tonic::codec::{Codec, DecodeBuf, Decoder};
use tonic_prost::ProstEncoder;

use super::proto;
use crate::model::ImageList;
use crate::model::image_list::{ImageSpans, WireImagesBuilder};

/// Why a response does not decode.
#[derive(Debug)]
pub(super) enum ListDecodeError {
    /// A field prost's decoders refuse.
    Prost(DecodeError),
    /// A length past the end of its message, a string that is not UTF-8.
    Malformed(&'static str),
}

impl fmt::Display for ListDecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            // prost's own message starts "failed to decode Protobuf message: ".
            ListDecodeError::Prost(e) => write!(f, "{e}"),
            ListDecodeError::Malformed(what) => {
                write!(f, "failed to decode Protobuf message: {what}")
            }
        }
    }
}

impl From<DecodeError> for ListDecodeError {
    fn from(e: DecodeError) -> ListDecodeError {
        ListDecodeError::Prost(e)
    }
}

/// The ListImages codec: the request encoded by prost, the response decoded by
/// [`decode_list`].
#[derive(Debug, Default)]
pub(super) struct ListImagesCodec;

impl Codec for ListImagesCodec {
    type Encode = proto::ListImagesRequest;
    type Decode = ImageList;
    type Encoder = ProstEncoder<proto::ListImagesRequest>;
    type Decoder = ListImagesDecoder;

    fn encoder(&mut self) -> Self::Encoder {
        ProstEncoder::default()
    }

    fn decoder(&mut self) -> Self::Decoder {
        ListImagesDecoder
    }
}

#[derive(Debug)]
pub(super) struct ListImagesDecoder;

impl Decoder for ListImagesDecoder {
    type Item = ImageList;
    type Error = Status;

    /// The message's bytes are taken from tonic's buffer as they are (`copy_to_bytes` of its
    /// `BytesMut` splits it, no copy) and kept as the list's text.
    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<ImageList>, Status> {
        let body = src.copy_to_bytes(src.remaining());
        decode_list(body)
            .map(Some)
            .map_err(|e| Status::internal(e.to_string()))
    }
}

/// Reads a length prefix and checks it against what is left: the end of the delimited
/// value, as `buf.remaining()` will be there.
fn delimited_end(buf: &mut Bytes) -> Result<usize, ListDecodeError> {
    let len = decode_varint(buf)?;
    let remaining = buf.remaining();
    if len > remaining as u64 {
        return Err(ListDecodeError::Malformed("buffer underflow"));
    }
    Ok(remaining - len as usize)
}

/// A string field's span in the message (`total` bytes long), checked as prost checks a
/// string: length-delimited, inside the message, UTF-8.
fn string_span(
    wire_type: WireType,
    buf: &mut Bytes,
    total: usize,
) -> Result<(usize, usize), ListDecodeError> {
    check_wire_type(WireType::LengthDelimited, wire_type)?;
    let end = delimited_end(buf)?;
    let len = buf.remaining() - end;
    let start = total - buf.remaining();
    if std::str::from_utf8(&buf.chunk()[..len]).is_err() {
        return Err(ListDecodeError::Malformed(
            "invalid string value: data is not UTF-8 encoded",
        ));
    }
    buf.advance(len);
    Ok((start, len))
}

/// Runs `field` over each field of the delimited message at `buf` (its key read by the
/// caller), as prost's merge loop does.
fn each_field(
    wire_type: WireType,
    buf: &mut Bytes,
    mut field: impl FnMut(u32, WireType, &mut Bytes) -> Result<(), ListDecodeError>,
) -> Result<(), ListDecodeError> {
    check_wire_type(WireType::LengthDelimited, wire_type)?;
    let end = delimited_end(buf)?;
    while buf.remaining() > end {
        let (tag, wire_type) = decode_key(buf)?;
        field(tag, wire_type, buf)?;
    }
    if buf.remaining() != end {
        return Err(ListDecodeError::Malformed("delimited length exceeded"));
    }
    Ok(())
}

/// One image's fields as spans, reused from image to image.
#[derive(Debug, Default)]
struct ImageScratch {
    id: (usize, usize),
    handler: (usize, usize),
    tags: Vec<(usize, usize)>,
    digests: Vec<(usize, usize)>,
    size: u64,
    pinned: bool,
}

impl ImageScratch {
    fn clear(&mut self) {
        self.id = (0, 0);
        self.handler = (0, 0);
        self.tags.clear();
        self.digests.clear();
        self.size = 0;
        self.pinned = false;
    }

    fn spans(&self) -> ImageSpans<'_> {
        ImageSpans {
            id: self.id,
            handler: self.handler,
            tags: &self.tags,
            digests: &self.digests,
            size: self.size,
            pinned: self.pinned,
        }
    }

    /// One field of a `runtime.v1.Image`.
    fn field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buf: &mut Bytes,
        total: usize,
    ) -> Result<(), ListDecodeError> {
        let ctx = DecodeContext::default();
        match tag {
            1 => self.id = string_span(wire_type, buf, total)?,
            2 => self.tags.push(string_span(wire_type, buf, total)?),
            3 => self.digests.push(string_span(wire_type, buf, total)?),
            4 => uint64::merge(wire_type, &mut self.size, buf, ctx)?,
            5 => message::merge(wire_type, &mut proto::Int64Value::default(), buf, ctx)?,
            6 => {
                string_span(wire_type, buf, total)?;
            }
            // The ImageSpec: its runtime handler (field 19) is kept, the last one wins across
            // repeated specs (protobuf merges them); the other fields are checked and dropped.
            7 => each_field(wire_type, buf, |tag, wire_type, buf| {
                let ctx = DecodeContext::default();
                match tag {
                    1 | 18 | 20 => {
                        string_span(wire_type, buf, total)?;
                    }
                    // As the generated code: a map field's wire type is not checked.
                    2 => hash_map::merge(
                        string::merge,
                        string::merge,
                        &mut HashMap::<String, String>::new(),
                        buf,
                        ctx,
                    )?,
                    19 => self.handler = string_span(wire_type, buf, total)?,
                    _ => skip_field(wire_type, tag, buf, ctx)?,
                }
                Ok(())
            })?,
            8 => pbool::merge(wire_type, &mut self.pinned, buf, ctx)?,
            _ => skip_field(wire_type, tag, buf, ctx)?,
        }
        Ok(())
    }
}

/// Decodes a `runtime.v1.ListImagesResponse` into an [`ImageList`] over `body` itself.
pub(super) fn decode_list(body: Bytes) -> Result<ImageList, ListDecodeError> {
    let total = body.len();
    let mut buf = body.clone();
    let mut builder: Option<WireImagesBuilder> = None;
    let mut image = ImageScratch::default();
    while buf.has_remaining() {
        let (tag, wire_type) = decode_key(&mut buf)?;
        if tag != 1 {
            skip_field(wire_type, tag, &mut buf, DecodeContext::default())?;
            continue;
        }
        check_wire_type(WireType::LengthDelimited, wire_type)?;
        let list = builder.get_or_insert_with(|| {
            // The list's length, counted in the bytes still to decode: one allocation of the
            // exact size instead of doubling.
            WireImagesBuilder::new(body.clone(), entries_ahead(buf.chunk()))
        });
        image.clear();
        each_field(wire_type, &mut buf, |tag, wire_type, buf| {
            image.field(tag, wire_type, buf, total)
        })?;
        list.push(image.spans())
            .map_err(|_| ListDecodeError::Malformed("a field outside the message"))?;
    }
    Ok(builder.map(WireImagesBuilder::finish).unwrap_or_default())
}

/// How many entries of a message's repeated field 1 (a ListImagesResponse's images, a
/// ListContainersResponse's containers) lie from `bytes` on, where `bytes` start at the
/// length of an entry whose key was just read: that one and every later field 1. A capacity
/// hint only: it stops at the first byte that does not parse (the decode then fails or
/// goes on as it would without the hint).
pub(super) fn entries_ahead(mut bytes: &[u8]) -> usize {
    let skip = |bytes: &mut &[u8], wire_type: WireType| -> Option<()> {
        let len = match wire_type {
            WireType::Varint => {
                prost::encoding::decode_varint(bytes).ok()?;
                0
            }
            WireType::SixtyFourBit => 8,
            WireType::ThirtyTwoBit => 4,
            WireType::LengthDelimited => {
                usize::try_from(prost::encoding::decode_varint(bytes).ok()?).ok()?
            }
            WireType::StartGroup | WireType::EndGroup => return None,
        };
        *bytes = bytes.get(len..)?;
        Some(())
    };
    let mut count = 0;
    if skip(&mut bytes, WireType::LengthDelimited).is_none() {
        return count;
    }
    count += 1;
    while !bytes.is_empty() {
        let Ok((tag, wire_type)) = prost::encoding::decode_key(&mut bytes) else {
            break;
        };
        if skip(&mut bytes, wire_type).is_none() {
            break;
        }
        if tag == 1 && wire_type == WireType::LengthDelimited {
            count += 1;
        }
    }
    count
}

#[cfg(test)]
mod tests {
    use prost::Message;

    use super::super::decode_test_support::{
        assert_decodes_as_generated, random_spec, response_bytes, text,
    };
    use super::super::{convert, proto};
    use super::decode_list;
    use crate::model::RuntimeImage;

    /// What the generated decode and the conversion make of `bytes`.
    fn generated(bytes: &[u8]) -> Result<Vec<RuntimeImage>, prost::DecodeError> {
        proto::ListImagesResponse::decode(bytes).map(|response| {
            response
                .images
                .into_iter()
                .map(convert::image_from_proto)
                .collect()
        })
    }

    fn custom(bytes: &[u8]) -> Result<Vec<RuntimeImage>, super::ListDecodeError> {
        decode_list(bytes::Bytes::copy_from_slice(bytes)).map(|list| list.to_images())
    }

    fn words(rng: &mut fastrand::Rng) -> Vec<String> {
        (0..rng.usize(0..4)).map(|_| text(rng)).collect()
    }

    /// A generated Image with every field set at random, the dropped ones included.
    fn random_image(rng: &mut fastrand::Rng) -> proto::Image {
        let spec = rng.bool().then(|| random_spec(rng));
        proto::Image {
            id: text(rng),
            repo_tags: words(rng),
            repo_digests: words(rng),
            size: rng.u64(..),
            uid: rng.bool().then(|| proto::Int64Value { value: rng.i64(..) }),
            username: text(rng),
            spec,
            pinned: rng.bool(),
        }
    }

    /// A response of images, each one to three generated Images concatenated, with unknown
    /// fields and known tags (1..=8) of any wire type between.
    fn images_response(rng: &mut fastrand::Rng) -> Vec<u8> {
        response_bytes(rng, 9, |rng, body| {
            random_image(rng).encode(body).expect("a Vec grows");
        })
    }

    /// The custom decode is the generated decode and the conversion: the same images (ids,
    /// names, sizes, pins, handlers, in list order) from generated responses with repeated
    /// fields and unknown fields, and an error exactly where the generated decode errs
    /// (truncated or corrupted bytes).
    #[test]
    fn decodes_exactly_the_images_the_generated_decode_and_conversion_yield() {
        let images = assert_decodes_as_generated(images_response, generated, custom);
        assert!(images > 1_000, "the cases held images ({images})");
    }

    /// A malformed response says what prost's decode says, once: a wrong wire type from
    /// prost's checks, a length past the end or bytes that are not UTF-8 from ours.
    #[test]
    fn a_malformed_response_names_the_problem_once() {
        let prefix = "failed to decode Protobuf message: ";
        // Field 1 as a varint; an image whose id runs past the end; an id that is not UTF-8.
        for bytes in [
            &[0x08, 0x01][..],
            &[0x0a, 0x02, 0x0a, 0x05],
            &[0x0a, 0x03, 0x0a, 0x01, 0xff],
        ] {
            let error = decode_list(bytes::Bytes::copy_from_slice(bytes))
                .expect_err("malformed")
                .to_string();
            assert!(error.starts_with(prefix), "{error}");
            assert_eq!(error.matches(prefix).count(), 1, "{error}");
        }
    }

    /// The list's text is the response's bytes themselves, not a copy.
    #[test]
    fn the_list_keeps_the_response_bytes_without_a_copy() {
        let mut rng = fastrand::Rng::with_seed(3);
        let mut checked = 0;
        while checked < 20 {
            let body = bytes::Bytes::from(images_response(&mut rng));
            if let Ok(list) = decode_list(body.clone())
                && let Some(text) = list.wire_text()
            {
                assert_eq!(text.as_ptr(), body.as_ptr());
                assert_eq!(text.len(), body.len());
                checked += 1;
            }
        }
    }
}
