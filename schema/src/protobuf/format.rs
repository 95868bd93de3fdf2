//! Protocol Buffers payloads of both encodings: into the user's `prost` type
//! ([`ProtobufFormat`]; binary needs no revision, since field numbers keep revisions
//! compatible; proto3 JSON is read by the revision's descriptor, then re-encoded), or into a
//! serde type ([`ProtobufSerdeFormat`]) through a dynamic message built from the revision's
//! descriptor, with the `.proto`'s field names.

use crate::attributes::Encoding;
use crate::protobuf::compile::message_of;
use crate::reader::{Format, Problem, field_of, json_problem};
use crate::source::{Revision, SchemaType};
use prost_reflect::{DynamicMessage, MessageDescriptor, SerializeOptions};
use serde::de::DeserializeOwned;
use std::marker::PhantomData;

/// Protocol Buffers into the `prost` type `M`.
pub(crate) struct ProtobufFormat<M>(PhantomData<fn() -> M>);

impl<M> Default for ProtobufFormat<M> {
    fn default() -> Self {
        Self(PhantomData)
    }
}

/// Protocol Buffers into the serde type `T`.
pub(crate) struct ProtobufSerdeFormat<T>(PhantomData<fn() -> T>);

impl<T> Default for ProtobufSerdeFormat<T> {
    fn default() -> Self {
        Self(PhantomData)
    }
}

/// What prost says went wrong: the fields it was in (`lines.price`), and its description up to
/// any number it quotes from the payload (a tag, a wire type).
fn prost_problem(error: &prost::DecodeError) -> Problem {
    let text = error.to_string();
    let mut rest = text
        .strip_prefix("failed to decode Protobuf message: ")
        .unwrap_or(&text);
    // `Message.field: ` for each message it was in, the innermost first, as prost unwinds.
    let mut fields = Vec::new();
    while let Some((step, after)) = rest.split_once(": ") {
        match step.rsplit_once('.') {
            Some((_, field)) if !step.contains(' ') => {
                fields.push(field);
                rest = after;
            }
            _ => break,
        }
    }
    fields.reverse();
    let description = rest.split(':').next().unwrap_or_default().trim();
    Problem::at(
        fields.join("."),
        format!("not the revision's wire format: {description}"),
    )
}

/// A proto3 JSON payload as a dynamic message of `message`.
fn from_json(message: &MessageDescriptor, data: &[u8]) -> Result<DynamicMessage, Problem> {
    let mut json = serde_json::Deserializer::from_slice(data);
    let mut track = serde_path_to_error::Track::new();
    let read = DynamicMessage::deserialize(
        message.clone(),
        serde_path_to_error::Deserializer::new(&mut json, &mut track),
    );
    let decoded = read.and_then(|m| json.end().map(|()| m));
    decoded.map_err(|e| {
        let mut problem = json_problem(&e);
        problem.field = Some(field_of(&track.path())).filter(|f| !f.is_empty());
        problem
    })
}

impl<M: prost::Message + Default + 'static> Format for ProtobufFormat<M> {
    type Output = M;
    type Compiled = MessageDescriptor;
    const SCHEMA_TYPE: SchemaType = SchemaType::ProtocolBuffer;

    fn needs_revision(&self, encoding: Encoding) -> bool {
        encoding == Encoding::Json
    }

    fn compile(&self, revision: &Revision) -> Result<MessageDescriptor, Problem> {
        message_of(&revision.definition)
    }

    fn decode(
        &self,
        message: Option<&MessageDescriptor>,
        encoding: Encoding,
        data: &[u8],
    ) -> Result<M, Problem> {
        match (encoding, message) {
            (Encoding::Binary, _) => M::decode(data).map_err(|e| prost_problem(&e)),
            (Encoding::Json, Some(message)) => {
                let dynamic = from_json(message, data)?;
                M::decode(prost::Message::encode_to_vec(&dynamic).as_slice()).map_err(|e| {
                    let mut problem = prost_problem(&e);
                    problem.problem =
                        "the revision's message does not fit the prost type".to_string();
                    problem
                })
            }
            (Encoding::Json, None) => Err(Problem::new("a JSON message needs its revision")),
        }
    }
}

impl<T: DeserializeOwned + 'static> Format for ProtobufSerdeFormat<T> {
    type Output = T;
    type Compiled = MessageDescriptor;
    const SCHEMA_TYPE: SchemaType = SchemaType::ProtocolBuffer;

    fn compile(&self, revision: &Revision) -> Result<MessageDescriptor, Problem> {
        message_of(&revision.definition)
    }

    fn decode(
        &self,
        message: Option<&MessageDescriptor>,
        encoding: Encoding,
        data: &[u8],
    ) -> Result<T, Problem> {
        let message = message.expect("a dynamic message needs its revision");
        let dynamic = match encoding {
            Encoding::Binary => {
                DynamicMessage::decode(message.clone(), data).map_err(|e| prost_problem(&e))?
            }
            Encoding::Json => from_json(message, data)?,
        };
        let options = SerializeOptions::new()
            .use_proto_field_name(true)
            .skip_default_fields(false)
            .stringify_64_bit_integers(false);
        let json = dynamic
            .serialize_with_options(serde_json::value::Serializer, &options)
            .map_err(|_| Problem::new("the message does not convert to the handler's type"))?;
        serde_path_to_error::deserialize::<_, T>(json).map_err(|e| {
            Problem::at(
                field_of(e.path()),
                "the value does not fit the handler's type",
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const V1: &str = r#"syntax = "proto3";
        message Order { int64 id = 1; string note = 2; message Line { int32 price = 1; } repeated Line lines = 3; }"#;

    #[derive(Clone, PartialEq, prost::Message)]
    struct Line {
        #[prost(int32, tag = "1")]
        price: i32,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    struct Order {
        #[prost(int64, tag = "1")]
        id: i64,
        #[prost(message, repeated, tag = "3")]
        lines: Vec<Line>,
    }

    fn v1() -> MessageDescriptor {
        message_of(V1).unwrap()
    }

    #[test]
    fn binary_and_json_decode_into_the_prost_type() {
        let format = ProtobufFormat::<Order>::default();
        let order = Order {
            id: 7,
            lines: vec![Line { price: 3 }],
        };
        let binary = prost::Message::encode_to_vec(&order);
        assert_eq!(
            format.decode(None, Encoding::Binary, &binary),
            Ok(order.clone())
        );
        let json = br#"{"id":"7","note":"x","lines":[{"price":3}]}"#;
        assert_eq!(format.decode(Some(&v1()), Encoding::Json, json), Ok(order));
    }

    #[test]
    fn a_bad_payload_names_the_field_and_not_the_value() {
        let format = ProtobufFormat::<Order>::default();
        // lines: a length of 100 with 2 bytes left.
        let problem = format
            .decode(None, Encoding::Binary, &[0x1a, 100, 1, 2])
            .unwrap_err();
        assert_eq!(problem.field.as_deref(), Some("lines"));
        let json = br#"{"id":"7","lines":[{"price":"4111-1111"}]}"#;
        let problem = format
            .decode(Some(&v1()), Encoding::Json, json)
            .unwrap_err();
        assert_eq!(
            problem.field.as_deref(),
            Some("lines[0].price"),
            "{problem:?}"
        );
        assert!(!format!("{problem:?}").contains("4111"));
    }

    #[test]
    fn a_serde_type_gets_the_protos_field_names() {
        #[derive(Debug, PartialEq, serde::Deserialize)]
        struct Plain {
            id: i64,
            note: String,
            lines: Vec<std::collections::HashMap<String, i32>>,
        }
        let format = ProtobufSerdeFormat::<Plain>::default();
        let binary = prost::Message::encode_to_vec(&Order {
            id: 9,
            lines: vec![Line { price: 2 }],
        });
        let plain = format
            .decode(Some(&v1()), Encoding::Binary, &binary)
            .unwrap();
        assert_eq!(plain.id, 9);
        assert_eq!(plain.note, "", "proto3's default, written out");
        assert_eq!(plain.lines[0]["price"], 2);
        let json = format
            .decode(
                Some(&v1()),
                Encoding::Json,
                br#"{"id":"9","lines":[{"price":2}]}"#,
            )
            .unwrap();
        assert_eq!(json, plain);
    }
}
