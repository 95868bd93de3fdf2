//! What every fuzz target shares: each decoder built once on revisions given in code, and a
//! delivery stamped as Pub/Sub stamps a schema topic's messages. A target hands the fuzzer's
//! bytes to one decoder and asserts only that it returns (an `Ok` or a decode error): a panic,
//! a stack overflow or an allocation beyond libFuzzer's `-rss_limit_mb` is the finding.

use leasehold::testing::delivery;
use leasehold::{Decoder, Delivery};
use leasehold_schema::{
    AvroDecoder, FixedRevisions, ProtobufDecoder, ProtobufSerdeDecoder, ReaderRevision, Revision,
    SchemaType, Schemas,
};
use std::sync::OnceLock;

pub const AVRO: &str = "projects/fuzz/schemas/avro";
pub const PROTO: &str = "projects/fuzz/schemas/proto";
/// The writer revision of every fuzzed Avro payload; the reader is [`AVRO_READER`].
pub const AVRO_WRITER: &str = "0000000a";
pub const AVRO_READER: &str = "0000000b";
pub const PROTO_REVISION: &str = "0000000c";

/// Every Avro type, nested, recursive (a `Node` holds `Node`s), as the writer wrote it.
pub const AVRO_V1: &str = r#"{"type":"record","name":"Node","namespace":"fuzz","fields":[
    {"name":"id","type":"int"},
    {"name":"flag","type":"boolean"},
    {"name":"ratio","type":"float"},
    {"name":"weight","type":"double"},
    {"name":"name","type":"string"},
    {"name":"blob","type":"bytes"},
    {"name":"hash","type":{"type":"fixed","name":"Hash","size":4}},
    {"name":"kind","type":{"type":"enum","name":"Kind","symbols":["A","B","C"]}},
    {"name":"tags","type":{"type":"map","values":"long"}},
    {"name":"at","type":{"type":"long","logicalType":"timestamp-millis"}},
    {"name":"price","type":{"type":"bytes","logicalType":"decimal","precision":9,"scale":2}},
    {"name":"children","type":{"type":"array","items":"Node"}},
    {"name":"next","type":["null","Node","string"]}]}"#;

/// The reader: `id` promoted to long, `blob` dropped, `extra` added with a default.
pub const AVRO_V2: &str = r#"{"type":"record","name":"Node","namespace":"fuzz","fields":[
    {"name":"id","type":"long"},
    {"name":"flag","type":"boolean"},
    {"name":"ratio","type":"double"},
    {"name":"weight","type":"double"},
    {"name":"name","type":"string"},
    {"name":"hash","type":{"type":"fixed","name":"Hash","size":4}},
    {"name":"kind","type":{"type":"enum","name":"Kind","symbols":["A","B","C"]}},
    {"name":"tags","type":{"type":"map","values":"long"}},
    {"name":"at","type":{"type":"long","logicalType":"timestamp-millis"}},
    {"name":"price","type":{"type":"bytes","logicalType":"decimal","precision":9,"scale":2}},
    {"name":"children","type":{"type":"array","items":"Node"}},
    {"name":"next","type":["null","Node","string"]},
    {"name":"extra","type":"string","default":"none"}]}"#;

pub const PROTO_DEFINITION: &str = r#"syntax = "proto3";
message Tree {
    enum Kind { A = 0; B = 1; }
    int64 id = 1;
    string name = 2;
    repeated sint64 sizes = 3;
    repeated Tree children = 4;
    map<string, int32> tags = 5;
    Kind kind = 6;
    oneof pick { bytes blob = 7; double ratio = 8; }
    fixed32 hash = 9;
}"#;

/// Any value the decoder gives, read and dropped: the handler's type is not what is fuzzed.
#[derive(Debug)]
pub struct Anything;

impl<'de> serde::Deserialize<'de> for Anything {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        serde::de::IgnoredAny::deserialize(d).map(|_| Anything)
    }
}

/// `PROTO_DEFINITION`'s message, as `prost` builds it.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Tree {
    #[prost(int64, tag = "1")]
    pub id: i64,
    #[prost(string, tag = "2")]
    pub name: String,
    #[prost(sint64, repeated, tag = "3")]
    pub sizes: Vec<i64>,
    #[prost(message, repeated, tag = "4")]
    pub children: Vec<Tree>,
    #[prost(map = "string, int32", tag = "5")]
    pub tags: std::collections::HashMap<String, i32>,
    #[prost(int32, tag = "6")]
    pub kind: i32,
    #[prost(bytes = "vec", tag = "7")]
    pub blob: Vec<u8>,
    #[prost(fixed32, tag = "9")]
    pub hash: u32,
}

fn schemas() -> &'static Schemas {
    static SCHEMAS: OnceLock<Schemas> = OnceLock::new();
    SCHEMAS.get_or_init(|| {
        Schemas::new(FixedRevisions::new([
            Revision::new(AVRO, AVRO_WRITER, SchemaType::Avro, AVRO_V1),
            Revision::new(AVRO, AVRO_READER, SchemaType::Avro, AVRO_V2),
            Revision::new(PROTO, PROTO_REVISION, SchemaType::ProtocolBuffer, PROTO_DEFINITION),
        ]))
    })
}

/// A delivery of `schema`'s `revision` in `encoding`, its revision fetched by `decoder`.
pub fn stamped<D: Decoder>(decoder: &D, schema: &str, revision: &str, encoding: &str) -> Delivery {
    let delivery = delivery()
        .attribute("googclient_schemaname", schema)
        .attribute("googclient_schemarevisionid", revision)
        .attribute("googclient_schemaencoding", encoding)
        .build();
    if let Some(fetch) = decoder.prepare(&delivery) {
        futures::executor::block_on(fetch).expect("the revision is given in code");
    }
    delivery
}

/// The Avro decoder, reading as [`AVRO_READER`].
pub fn avro() -> &'static AvroDecoder<Anything> {
    static DECODER: OnceLock<AvroDecoder<Anything>> = OnceLock::new();
    DECODER.get_or_init(|| {
        futures::executor::block_on(
            schemas().avro(AVRO, ReaderRevision::Pinned(AVRO_READER.into())),
        )
        .expect("the reader revision parses")
    })
}

/// The Protocol Buffers decoder into [`Tree`].
pub fn protobuf() -> &'static ProtobufDecoder<Tree> {
    static DECODER: OnceLock<ProtobufDecoder<Tree>> = OnceLock::new();
    DECODER.get_or_init(|| {
        futures::executor::block_on(schemas().protobuf(PROTO)).expect("the definition compiles")
    })
}

/// The Protocol Buffers decoder into a serde type, through a dynamic message.
pub fn protobuf_dynamic() -> &'static ProtobufSerdeDecoder<Anything> {
    static DECODER: OnceLock<ProtobufSerdeDecoder<Anything>> = OnceLock::new();
    DECODER.get_or_init(|| {
        futures::executor::block_on(schemas().protobuf_serde(PROTO))
            .expect("the definition compiles")
    })
}
