//! ListImagesResponse decoded straight into the model's images: the client's ListImages
//! never builds the generated `proto::Image`s (their ImageSpec, uid and username, which
//! imagekeeper does not keep), so at 100k images the agent holds the response's bytes and
//! the images it keeps, not a third copy in between.
//!
//! Invariants: the decode yields exactly the images the generated decode followed by
//! `convert::image_from_proto` yields, for every input, unknown fields and repeated
//! occurrences of a field included (a repeated scalar: the last wins; a repeated `spec`:
//! merged, as protobuf merges messages), and fails exactly when the generated decode fails
//! (the fields it drops are still decoded and checked, with prost's own field decoders).
//! Every image's name lists are trimmed to their length as they are decoded.

use std::collections::HashMap;

use prost::bytes::{Buf, BufMut};
use prost::encoding::{
    DecodeContext, WireType, bool as pbool, check_wire_type, hash_map, message, skip_field, string,
    uint64,
};
use prost::{DecodeError, Message};

use super::proto;
use crate::model::{ImageId, RuntimeImage};

/// `runtime.v1.ListImagesResponse` as imagekeeper keeps it: the images in list order.
#[derive(Debug, Default, PartialEq)]
pub(super) struct ListedImagesResponse {
    pub(super) images: Vec<RuntimeImage>,
}

/// One `runtime.v1.Image` as it is decoded: the fields imagekeeper keeps.
#[derive(Debug, Default)]
struct ImageFields {
    id: String,
    repo_tags: Vec<String>,
    repo_digests: Vec<String>,
    size: u64,
    pinned: bool,
    /// `spec.runtime_handler` (empty without a spec).
    runtime_handler: String,
}

impl ImageFields {
    fn into_image(mut self) -> RuntimeImage {
        self.repo_tags.shrink_to_fit();
        self.repo_digests.shrink_to_fit();
        RuntimeImage {
            id: ImageId::new(self.id),
            repo_tags: self.repo_tags,
            repo_digests: self.repo_digests,
            size: self.size,
            pinned: self.pinned,
            runtime_handler: self.runtime_handler,
        }
    }

    /// The image as the generated type, for encoding (never on the list's decode path).
    fn to_proto(&self) -> proto::Image {
        proto::Image {
            id: self.id.clone(),
            repo_tags: self.repo_tags.clone(),
            repo_digests: self.repo_digests.clone(),
            size: self.size,
            pinned: self.pinned,
            spec: (!self.runtime_handler.is_empty()).then(|| proto::ImageSpec {
                runtime_handler: self.runtime_handler.clone(),
                ..proto::ImageSpec::default()
            }),
            ..proto::Image::default()
        }
    }
}

/// One `runtime.v1.ImageSpec` merged into an image: its runtime handler is kept, the other
/// fields are decoded (so a malformed one fails as it would) and dropped.
#[derive(Debug)]
struct SpecFields<'a> {
    runtime_handler: &'a mut String,
}

impl Message for SpecFields<'_> {
    fn encode_raw(&self, buf: &mut impl BufMut) {
        if !self.runtime_handler.is_empty() {
            string::encode(19, self.runtime_handler, buf);
        }
    }

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(), DecodeError> {
        match tag {
            1 | 18 | 20 => string::merge(wire_type, &mut String::new(), buf, ctx),
            // As the generated code: a map field's wire type is not checked.
            2 => hash_map::merge(
                string::merge,
                string::merge,
                &mut HashMap::<String, String>::new(),
                buf,
                ctx,
            ),
            19 => string::merge(wire_type, self.runtime_handler, buf, ctx),
            _ => skip_field(wire_type, tag, buf, ctx),
        }
    }

    fn encoded_len(&self) -> usize {
        if self.runtime_handler.is_empty() {
            0
        } else {
            string::encoded_len(19, self.runtime_handler)
        }
    }

    fn clear(&mut self) {
        self.runtime_handler.clear();
    }
}

impl Message for ImageFields {
    fn encode_raw(&self, buf: &mut impl BufMut) {
        self.to_proto().encode_raw(buf);
    }

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(), DecodeError> {
        match tag {
            1 => string::merge(wire_type, &mut self.id, buf, ctx),
            2 => string::merge_repeated(wire_type, &mut self.repo_tags, buf, ctx),
            3 => string::merge_repeated(wire_type, &mut self.repo_digests, buf, ctx),
            4 => uint64::merge(wire_type, &mut self.size, buf, ctx),
            5 => message::merge(wire_type, &mut proto::Int64Value::default(), buf, ctx),
            6 => string::merge(wire_type, &mut String::new(), buf, ctx),
            7 => {
                let mut spec = SpecFields {
                    runtime_handler: &mut self.runtime_handler,
                };
                message::merge(wire_type, &mut spec, buf, ctx)
            }
            8 => pbool::merge(wire_type, &mut self.pinned, buf, ctx),
            _ => skip_field(wire_type, tag, buf, ctx),
        }
    }

    fn encoded_len(&self) -> usize {
        self.to_proto().encoded_len()
    }

    fn clear(&mut self) {
        *self = ImageFields::default();
    }
}

impl Message for ListedImagesResponse {
    fn encode_raw(&self, buf: &mut impl BufMut) {
        for image in &self.images {
            message::encode(1, &fields_of(image), buf);
        }
    }

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(), DecodeError> {
        match tag {
            1 => {
                check_wire_type(WireType::LengthDelimited, wire_type)?;
                if self.images.capacity() == 0 {
                    // The list's length, counted in the bytes still to decode: one allocation
                    // of the exact size instead of doubling (at 100k images a quarter of the
                    // list's array, and the copy at each doubling).
                    self.images.reserve_exact(images_ahead(buf.chunk()));
                }
                let mut fields = ImageFields::default();
                message::merge(wire_type, &mut fields, buf, ctx)?;
                self.images.push(fields.into_image());
                Ok(())
            }
            _ => skip_field(wire_type, tag, buf, ctx),
        }
    }

    fn encoded_len(&self) -> usize {
        self.images
            .iter()
            .map(|image| message::encoded_len(1, &fields_of(image)))
            .sum()
    }

    fn clear(&mut self) {
        self.images.clear();
    }
}

/// How many images a ListImagesResponse holds from `bytes` on, where `bytes` start at the
/// length of an image whose key was just read: that one and every later field 1. A capacity
/// hint only: it stops at the first byte that does not parse (the decode then fails or
/// goes on as it would without the hint).
fn images_ahead(mut bytes: &[u8]) -> usize {
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

fn fields_of(image: &RuntimeImage) -> ImageFields {
    ImageFields {
        id: image.id.as_str().to_string(),
        repo_tags: image.repo_tags.clone(),
        repo_digests: image.repo_digests.clone(),
        size: image.size,
        pinned: image.pinned,
        runtime_handler: image.runtime_handler.clone(),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use prost::Message;
    use prost::encoding::{WireType, encode_key, encode_varint};

    use super::super::{convert, proto};
    use super::ListedImagesResponse;
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

    fn custom(bytes: &[u8]) -> Result<Vec<RuntimeImage>, prost::DecodeError> {
        ListedImagesResponse::decode(bytes).map(|response| response.images)
    }

    fn text(rng: &mut fastrand::Rng) -> String {
        let n = rng.usize(0..12);
        (0..n)
            .map(|_| ['a', 'b', ':', '/', '@', 'é'][rng.usize(0..6)])
            .collect()
    }

    fn words(rng: &mut fastrand::Rng) -> Vec<String> {
        (0..rng.usize(0..4)).map(|_| text(rng)).collect()
    }

    /// A generated Image with every field set at random, the dropped ones included.
    fn random_image(rng: &mut fastrand::Rng) -> proto::Image {
        let spec = rng.bool().then(|| proto::ImageSpec {
            image: text(rng),
            annotations: (0..rng.usize(0..3))
                .map(|_| (text(rng), text(rng)))
                .collect::<HashMap<_, _>>(),
            user_specified_image: text(rng),
            runtime_handler: ["", "runc", "kata"][rng.usize(0..3)].to_string(),
            image_ref: text(rng),
        });
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

    /// Unknown fields of every wire type (tags no runtime.v1 message here uses), and now
    /// and then a known tag (1..=8) with any wire type (mostly malformed).
    fn unknown_fields(rng: &mut fastrand::Rng, buf: &mut Vec<u8>) {
        for _ in 0..rng.usize(0..3) {
            if rng.usize(0..20) == 0 {
                let wire = [
                    WireType::Varint,
                    WireType::SixtyFourBit,
                    WireType::LengthDelimited,
                    WireType::ThirtyTwoBit,
                ][rng.usize(0..4)];
                encode_key(rng.u32(1..9), wire, buf);
                buf.extend((0..rng.usize(0..10)).map(|_| rng.u8(..)));
                continue;
            }
            match rng.usize(0..4) {
                0 => {
                    encode_key(rng.u32(100..200), WireType::Varint, buf);
                    encode_varint(rng.u64(..), buf);
                }
                1 => {
                    encode_key(rng.u32(100..200), WireType::SixtyFourBit, buf);
                    buf.extend_from_slice(&rng.u64(..).to_le_bytes());
                }
                2 => {
                    encode_key(rng.u32(100..200), WireType::ThirtyTwoBit, buf);
                    buf.extend_from_slice(&rng.u32(..).to_le_bytes());
                }
                _ => {
                    let payload: Vec<u8> = (0..rng.usize(0..6)).map(|_| rng.u8(..)).collect();
                    encode_key(rng.u32(100..200), WireType::LengthDelimited, buf);
                    encode_varint(payload.len() as u64, buf);
                    buf.extend_from_slice(&payload);
                }
            }
        }
    }

    /// One image's bytes: one to three generated Images concatenated (protobuf merges them:
    /// every scalar and the spec repeated, the name lists appended), unknown fields between.
    fn image_bytes(rng: &mut fastrand::Rng) -> Vec<u8> {
        let mut body = Vec::new();
        for _ in 0..rng.usize(1..4) {
            unknown_fields(rng, &mut body);
            random_image(rng).encode(&mut body).expect("a Vec grows");
        }
        unknown_fields(rng, &mut body);
        body
    }

    fn response_bytes(rng: &mut fastrand::Rng) -> Vec<u8> {
        let mut buf = Vec::new();
        for _ in 0..rng.usize(0..8) {
            unknown_fields(rng, &mut buf);
            let body = image_bytes(rng);
            encode_key(1, WireType::LengthDelimited, &mut buf);
            encode_varint(body.len() as u64, &mut buf);
            buf.extend_from_slice(&body);
        }
        unknown_fields(rng, &mut buf);
        buf
    }

    /// The custom decode is the generated decode and the conversion: the same images (ids,
    /// names, sizes, pins, handlers, in list order) from generated responses with repeated
    /// fields and unknown fields, and an error exactly where the generated decode errs
    /// (truncated or corrupted bytes).
    #[test]
    fn decodes_exactly_the_images_the_generated_decode_and_conversion_yield() {
        let mut rng = fastrand::Rng::with_seed(29);
        let mut errors = 0;
        for case in 0..2_000 {
            let mut bytes = response_bytes(&mut rng);
            if case % 4 == 3 && !bytes.is_empty() {
                // A corruption: truncated, or one byte changed.
                if rng.bool() {
                    bytes.truncate(rng.usize(0..bytes.len()));
                } else {
                    let at = rng.usize(0..bytes.len());
                    bytes[at] = rng.u8(..);
                }
            }
            let want = generated(&bytes);
            let got = custom(&bytes);
            match (&want, &got) {
                (Ok(want), Ok(got)) => assert_eq!(got, want, "case {case}: {bytes:?}"),
                (Err(_), Err(_)) => errors += 1,
                _ => panic!("case {case}: generated {want:?}, custom {got:?}: {bytes:?}"),
            }
        }
        assert!(
            errors > 50,
            "the corruptions reached the error paths ({errors})"
        );
    }

    /// The list is allocated once, at its length (the count ahead of the first image).
    #[test]
    fn the_list_is_allocated_at_its_length() {
        let mut rng = fastrand::Rng::with_seed(3);
        let mut checked = 0;
        while checked < 200 {
            let bytes = response_bytes(&mut rng);
            if let Ok(images) = custom(&bytes) {
                assert_eq!(images.capacity(), images.len(), "{bytes:?}");
                checked += 1;
            }
        }
    }

    /// A response the custom type encodes decodes, through the generated decode, to the
    /// same images.
    #[test]
    fn encodes_what_the_generated_decode_reads_back() {
        let mut rng = fastrand::Rng::with_seed(7);
        let mut seen = 0;
        while seen < 50 {
            let Ok(images) = custom(&response_bytes(&mut rng)) else {
                continue;
            };
            seen += images.len();
            let encoded = ListedImagesResponse {
                images: images.clone(),
            }
            .encode_to_vec();
            assert_eq!(generated(&encoded).expect("decodes"), images);
        }
    }
}
