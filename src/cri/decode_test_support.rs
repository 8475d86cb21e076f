//! Test support shared by the custom decodes' proofs (`list_decode`, `containers_decode`):
//! random text, unknown and malformed fields, a response of repeated entries, and the one
//! loop that holds a custom decode to the generated decode over generated and corrupted
//! responses.

use std::collections::HashMap;
use std::fmt::Debug;

use prost::encoding::{WireType, encode_key, encode_varint};

use super::proto;

pub(super) fn text(rng: &mut fastrand::Rng) -> String {
    let n = rng.usize(0..12);
    (0..n)
        .map(|_| ['a', 'b', ':', '/', '@', 'é'][rng.usize(0..6)])
        .collect()
}

/// A generated ImageSpec with every field set at random.
pub(super) fn random_spec(rng: &mut fastrand::Rng) -> proto::ImageSpec {
    proto::ImageSpec {
        image: text(rng),
        annotations: (0..rng.usize(0..3))
            .map(|_| (text(rng), text(rng)))
            .collect::<HashMap<_, _>>(),
        user_specified_image: text(rng),
        runtime_handler: ["", "runc", "kata"][rng.usize(0..3)].to_string(),
        image_ref: text(rng),
    }
}

/// Unknown fields of every wire type (tags no runtime.v1 message here uses), and now and then
/// a known tag (`1..known_tags`) with any wire type (mostly malformed).
pub(super) fn unknown_fields(rng: &mut fastrand::Rng, buf: &mut Vec<u8>, known_tags: u32) {
    for _ in 0..rng.usize(0..3) {
        if rng.usize(0..20) == 0 {
            let wire = [
                WireType::Varint,
                WireType::SixtyFourBit,
                WireType::LengthDelimited,
                WireType::ThirtyTwoBit,
            ][rng.usize(0..4)];
            encode_key(rng.u32(1..known_tags), wire, buf);
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

/// A response of zero to seven entries of its field 1, each one to three generated messages
/// concatenated (protobuf merges them: every scalar and message repeated, the lists
/// appended), with unknown fields between.
pub(super) fn response_bytes(
    rng: &mut fastrand::Rng,
    known_tags: u32,
    mut entry: impl FnMut(&mut fastrand::Rng, &mut Vec<u8>),
) -> Vec<u8> {
    let mut buf = Vec::new();
    for _ in 0..rng.usize(0..8) {
        unknown_fields(rng, &mut buf, known_tags);
        let mut body = Vec::new();
        for _ in 0..rng.usize(1..4) {
            unknown_fields(rng, &mut body, known_tags);
            entry(rng, &mut body);
        }
        unknown_fields(rng, &mut body, known_tags);
        encode_key(1, WireType::LengthDelimited, &mut buf);
        encode_varint(body.len() as u64, &mut buf);
        buf.extend_from_slice(&body);
    }
    unknown_fields(rng, &mut buf, known_tags);
    buf
}

/// Over 2,000 responses from `response` (every fourth truncated or with one byte changed),
/// `custom` yields what `generated` yields and fails exactly where it fails. Returns how many
/// entries the decodes agreed on.
pub(super) fn assert_decodes_as_generated<T: PartialEq + Debug, E1: Debug, E2: Debug>(
    mut response: impl FnMut(&mut fastrand::Rng) -> Vec<u8>,
    generated: impl Fn(&[u8]) -> Result<Vec<T>, E1>,
    custom: impl Fn(&[u8]) -> Result<Vec<T>, E2>,
) -> usize {
    let mut rng = fastrand::Rng::with_seed(29);
    let mut errors = 0;
    let mut entries = 0;
    for case in 0..2_000 {
        let mut bytes = response(&mut rng);
        if case % 4 == 3 && !bytes.is_empty() {
            if rng.bool() {
                bytes.truncate(rng.usize(0..bytes.len()));
            } else {
                let at = rng.usize(0..bytes.len());
                bytes[at] = rng.u8(..);
            }
        }
        match (generated(&bytes), custom(&bytes)) {
            (Ok(want), Ok(got)) => {
                assert_eq!(got, want, "case {case}: {bytes:?}");
                entries += got.len();
            }
            (Err(_), Err(_)) => errors += 1,
            (want, got) => panic!("case {case}: generated {want:?}, custom {got:?}: {bytes:?}"),
        }
    }
    assert!(
        errors > 50,
        "the corruptions reached the error paths ({errors})"
    );
    entries
}
