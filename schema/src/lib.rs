//! Leasehold handlers for Pub/Sub topics with a schema: each Avro or Protocol Buffers message
//! decoded with the revision it was written with, into one type for the handler.
//!
//! ```no_run
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! use leasehold::{Connection, Delivery, Registration};
//! use leasehold_schema::{ReaderRevision, Schemas};
//!
//! #[derive(serde::Deserialize)]
//! struct Order { id: i64, qty: i32 }
//!
//! let connection = Connection::from_env();
//! let schemas = Schemas::connect(&connection).await?; // one per process: its revisions cache
//! let orders = schemas.avro::<Order>("projects/p/schemas/orders", ReaderRevision::Latest).await?;
//! let registration = Registration::decoded("projects/p/subscriptions/orders", orders,
//!     |order: Order, delivery: Delivery| async move {
//!         if order.qty > 0 { delivery.ack() } else { delivery.drop() }
//!     });
//! let subscription = leasehold::start(registration, &connection).await?;
//! # let _ = subscription; Ok(()) }
//! ```
//!
//! The manual (which revisions a decoder reads, rolling out a new revision, what happens to
//! messages it cannot read, what is counted) is this crate's README, `schema/README.md`.
//!
//! The code, bottom to top: `error.rs`, `source.rs` (the [`RevisionSource`] trait and
//! [`FixedRevisions`]), `stats.rs`, `attributes.rs`, `google.rs` (the only file that calls
//! Google's client), `cache.rs` ([`Schemas`]), `reader.rs` (what every decoder does around its
//! format), `avro/`, `protobuf/`, `decoders.rs` (the decoders a registration takes).
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

/// Every default and limit, each a named constant whose doc says why.
pub mod defaults {
    pub use crate::avro::check::MAX_DEPTH;
    pub use crate::cache::{
        DEFAULT_CACHE_CAPACITY, FETCH_BACKOFF_INITIAL, FETCH_BACKOFF_MAX, MISSING_TTL,
    };
    pub use crate::google::FETCH_TIMEOUT;
    pub use crate::stats::{MAX_REVISION_LABELS, OTHER_REVISIONS};
}
