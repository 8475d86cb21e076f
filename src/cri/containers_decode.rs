//! ListContainersResponse decoded straight into the model's containers: the client's
//! ListContainers never builds the generated `proto::Container`s (about 550 bytes each with
//! their metadata, labels and ImageSpec, where a [`RuntimeContainer`] is about 130 plus its
//! strings), and the list is allocated once at its length. At 10k containers, the detect of a
//! 100k-image node held 5.5 MB of generated containers at its peak.
//!
//! Invariants: the decode yields exactly the containers the generated decode followed by
//! `convert::container_from_proto` yields, for every input, unknown fields and repeated
//! occurrences of a field included (a repeated scalar: the last wins; a repeated message:
//! merged), and fails exactly when the generated decode fails (the fields it drops are
//! still decoded and checked, with prost's own field decoders).

use std::collections::HashMap;

use prost::bytes::{Buf, BufMut};
use prost::encoding::{
    DecodeContext, WireType, check_wire_type, hash_map, int32, int64, message, skip_field, string,
};
use prost::{DecodeError, Message};

use super::convert;
use super::proto;
use crate::model::RuntimeContainer;

/// `runtime.v1.ListContainersResponse` as imagekeeper keeps it: the containers in list order.
#[derive(Debug, Default, PartialEq)]
pub(super) struct ListedContainersResponse {
    pub(super) containers: Vec<RuntimeContainer>,
}

/// One `runtime.v1.Container` as it is decoded: the fields imagekeeper keeps.
#[derive(Debug, Default)]
struct ContainerFields {
    id: String,
    pod_sandbox_id: String,
    image_ref: String,
    image_id: String,
    state: i32,
    /// `image.image` and `image.runtime_handler` (empty without an ImageSpec).
    image: String,
    runtime_handler: String,
}

impl ContainerFields {
    fn into_container(self) -> RuntimeContainer {
        convert::container_from_proto(proto::Container {
            id: self.id,
            pod_sandbox_id: self.pod_sandbox_id,
            image: Some(proto::ImageSpec {
                image: self.image,
                runtime_handler: self.runtime_handler,
                ..proto::ImageSpec::default()
            }),
            image_ref: self.image_ref,
            state: self.state,
            image_id: self.image_id,
            ..proto::Container::default()
        })
    }

    /// The fields as the generated type: encoding, and the one conversion both decodes share.
    fn to_proto(&self) -> proto::Container {
        let has_spec = !self.image.is_empty() || !self.runtime_handler.is_empty();
        proto::Container {
            id: self.id.clone(),
            pod_sandbox_id: self.pod_sandbox_id.clone(),
            image: has_spec.then(|| proto::ImageSpec {
                image: self.image.clone(),
                runtime_handler: self.runtime_handler.clone(),
                ..proto::ImageSpec::default()
            }),
            image_ref: self.image_ref.clone(),
            state: self.state,
            image_id: self.image_id.clone(),
            ..proto::Container::default()
        }
    }
}

/// One entry of a `map<string, string>` field, decoded (so a malformed one fails as it would)
/// and dropped. As the generated code: a map field's wire type is not checked.
fn skip_string_map(buf: &mut impl Buf, ctx: DecodeContext) -> Result<(), DecodeError> {
    hash_map::merge(
        string::merge,
        string::merge,
        &mut HashMap::<String, String>::new(),
        buf,
        ctx,
    )
}

/// One `runtime.v1.ImageSpec` merged into a container: its image and runtime handler are
/// kept, the other fields are decoded (so a malformed one fails as it would) and dropped.
#[derive(Debug)]
struct SpecFields<'a> {
    image: &'a mut String,
    runtime_handler: &'a mut String,
}

impl Message for SpecFields<'_> {
    fn encode_raw(&self, buf: &mut impl BufMut) {
        if !self.image.is_empty() {
            string::encode(1, self.image, buf);
        }
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
            1 => string::merge(wire_type, self.image, buf, ctx),
            18 | 20 => string::merge(wire_type, &mut String::new(), buf, ctx),
            2 => skip_string_map(buf, ctx),
            19 => string::merge(wire_type, self.runtime_handler, buf, ctx),
            _ => skip_field(wire_type, tag, buf, ctx),
        }
    }

    fn encoded_len(&self) -> usize {
        let len = |tag, s: &String| {
            if s.is_empty() {
                0
            } else {
                string::encoded_len(tag, s)
            }
        };
        len(1, self.image) + len(19, self.runtime_handler)
    }

    fn clear(&mut self) {
        self.image.clear();
        self.runtime_handler.clear();
    }
}

impl Message for ContainerFields {
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
            2 => string::merge(wire_type, &mut self.pod_sandbox_id, buf, ctx),
            3 => message::merge(
                wire_type,
                &mut proto::ContainerMetadata::default(),
                buf,
                ctx,
            ),
            4 => {
                let mut spec = SpecFields {
                    image: &mut self.image,
                    runtime_handler: &mut self.runtime_handler,
                };
                message::merge(wire_type, &mut spec, buf, ctx)
            }
            5 => string::merge(wire_type, &mut self.image_ref, buf, ctx),
            6 => int32::merge(wire_type, &mut self.state, buf, ctx),
            7 => int64::merge(wire_type, &mut 0i64, buf, ctx),
            8 => skip_string_map(buf, ctx),
            10 => string::merge(wire_type, &mut self.image_id, buf, ctx),
            _ => skip_field(wire_type, tag, buf, ctx),
        }
    }

    fn encoded_len(&self) -> usize {
        self.to_proto().encoded_len()
    }

    fn clear(&mut self) {
        *self = ContainerFields::default();
    }
}

impl Message for ListedContainersResponse {
    fn encode_raw(&self, buf: &mut impl BufMut) {
        for container in &self.containers {
            message::encode(1, &convert::container_to_proto(container), buf);
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
                if self.containers.capacity() == 0 {
                    // The list's length, counted in the bytes still to decode: one allocation
                    // of the exact size instead of doubling.
                    self.containers
                        .reserve_exact(super::list_decode::entries_ahead(buf.chunk()));
                }
                let mut fields = ContainerFields::default();
                message::merge(wire_type, &mut fields, buf, ctx)?;
                self.containers.push(fields.into_container());
                Ok(())
            }
            _ => skip_field(wire_type, tag, buf, ctx),
        }
    }

    fn encoded_len(&self) -> usize {
        self.containers
            .iter()
            .map(|c| message::encoded_len(1, &convert::container_to_proto(c)))
            .sum()
    }

    fn clear(&mut self) {
        self.containers.clear();
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use prost::Message;

    use super::super::decode_test_support::{
        assert_decodes_as_generated, random_spec, response_bytes, text,
    };
    use super::super::{convert, proto};
    use super::ListedContainersResponse;
    use crate::model::RuntimeContainer;

    fn generated(bytes: &[u8]) -> Result<Vec<RuntimeContainer>, prost::DecodeError> {
        proto::ListContainersResponse::decode(bytes).map(|response| {
            response
                .containers
                .into_iter()
                .map(convert::container_from_proto)
                .collect()
        })
    }

    fn custom(bytes: &[u8]) -> Result<Vec<RuntimeContainer>, prost::DecodeError> {
        ListedContainersResponse::decode(bytes).map(|response| {
            assert_eq!(response.containers.capacity(), response.containers.len());
            response.containers
        })
    }

    fn random_container(rng: &mut fastrand::Rng) -> proto::Container {
        let spec = rng.bool().then(|| random_spec(rng));
        proto::Container {
            id: text(rng),
            pod_sandbox_id: text(rng),
            metadata: rng.bool().then(|| proto::ContainerMetadata {
                name: text(rng),
                attempt: rng.u32(..),
            }),
            image: spec,
            image_ref: text(rng),
            state: rng.i32(-1..5),
            created_at: rng.i64(..),
            labels: (0..rng.usize(0..3))
                .map(|_| (text(rng), text(rng)))
                .collect::<HashMap<_, _>>(),
            image_id: if rng.bool() { text(rng) } else { String::new() },
        }
    }

    /// A response of containers, each one to three generated Containers concatenated, with
    /// unknown fields and known tags (1..=10) of any wire type between.
    fn containers_response(rng: &mut fastrand::Rng) -> Vec<u8> {
        response_bytes(rng, 11, |rng, body| {
            random_container(rng).encode(body).expect("a Vec grows");
        })
    }

    /// The custom decode is the generated decode and the conversion: the same containers
    /// from generated responses with repeated and unknown fields, allocated at their number,
    /// and an error exactly where the generated decode errs (truncated or corrupted bytes).
    #[test]
    fn decodes_exactly_the_containers_the_generated_decode_and_conversion_yield() {
        let containers = assert_decodes_as_generated(containers_response, generated, custom);
        assert!(
            containers > 1_000,
            "the cases held containers ({containers})"
        );
    }

    /// What the custom type encodes, the generated decode reads back as the same containers.
    #[test]
    fn encodes_what_the_generated_decode_reads_back() {
        let mut rng = fastrand::Rng::with_seed(7);
        let mut seen = 0;
        while seen < 50 {
            let Ok(containers) = custom(&containers_response(&mut rng)) else {
                continue;
            };
            seen += containers.len();
            let encoded = ListedContainersResponse {
                containers: containers.clone(),
            }
            .encode_to_vec();
            assert_eq!(generated(&encoded).expect("decodes"), containers);
        }
    }
}
