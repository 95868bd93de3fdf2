#![doc = include_str!("../README.md")]
#![warn(missing_docs)]
#![warn(unreachable_pub)]
#![forbid(unsafe_code)]

mod attributes;
mod avro;
mod cache;
mod decoders;
mod error;
mod google;
mod protobuf;
mod reader;
mod source;
mod stats;

pub use attributes::Encoding;
pub use cache::Schemas;
pub use decoders::{
    AvroDecoder, ProtobufDecoder, ProtobufSerdeDecoder, ReaderRevision, SerdeDecoder,
};
pub use error::{FetchError, SchemaError};
pub use google::{GoogleSchemas, TopicSchema, topic_schema};
pub use source::{FixedRevisions, Revision, RevisionSource, SchemaType};
pub use stats::{RevisionReport, SchemaReport, SchemaStats};

/// The `prost` this crate decodes into ([`ProtobufDecoder`]'s `M: prost::Message`), for
/// matching versions.
pub use prost;

/// Every default and limit, each a named constant whose doc says why.
pub mod defaults {
    pub use crate::avro::check::MAX_DEPTH;
    pub use crate::cache::{
        DEFAULT_CACHE_CAPACITY, FETCH_BACKOFF_INITIAL, FETCH_BACKOFF_MAX, MISSING_TTL,
    };
    pub use crate::google::FETCH_TIMEOUT;
    pub use crate::stats::{MAX_REVISION_LABELS, OTHER_REVISIONS};
}
