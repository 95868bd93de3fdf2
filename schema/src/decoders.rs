//! The decoders a registration takes (`Registration::decoded` and its siblings), each built by a
//! [`Schemas`] method that checks the schema at start: [`AvroDecoder`] (Avro into a serde
//! type), [`ProtobufDecoder`] (Protocol Buffers into a `prost` type),
//! [`ProtobufSerdeDecoder`] (Protocol Buffers into a serde type) and [`SerdeDecoder`] (a serde
//! type, whichever the schema's type).

use crate::avro::format::AvroFormat;
use crate::cache::Schemas;
use crate::error::SchemaError;
use crate::protobuf::format::{ProtobufFormat, ProtobufSerdeFormat};
use crate::reader::{Format, Reader};
use crate::source::{Revision, SchemaType};
use crate::stats::SchemaStats;
use bytes::Bytes;
use leasehold::{DecodeError, Decoder, Delivery, Preparing};
use serde::de::DeserializeOwned;
use std::sync::Arc;

/// The revision an Avro decoder reads every message as (its *reader* revision, in Avro's
/// words): messages of other revisions are resolved to it by Avro's rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReaderRevision {
    /// The schema's latest revision when the decoder is built (at start): a new revision
    /// committed later is read as this one until the process restarts.
    Latest,
    /// This revision, whatever is committed after it.
    Pinned(String),
}

/// Implements [`Decoder`] and the accessors for a decoder wrapping a [`Reader`].
macro_rules! decoder {
    ($name:ident, $t:ident: [$($bound:tt)+]) => {
        impl<$t: $($bound)+> Decoder for $name<$t> {
            type Output = $t;

            fn prepare(&self, delivery: &Delivery) -> Option<Preparing> {
                self.reader.prepare(delivery)
            }

            fn decode(&self, data: Bytes, delivery: &Delivery) -> Result<$t, DecodeError> {
                self.reader.decode(data, delivery)
            }
        }

        impl<$t: $($bound)+> Clone for $name<$t> {
            fn clone(&self) -> Self {
                Self {
                    reader: self.reader.clone(),
                }
            }
        }

        impl<$t: $($bound)+> std::fmt::Debug for $name<$t> {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($name))
                    .field("schema", &&*self.reader.schema)
                    .finish_non_exhaustive()
            }
        }

        impl<$t: $($bound)+> $name<$t> {
            /// What it counted: messages decoded and failed per revision, revision lookups.
            /// Clones of the decoder share it.
            pub fn stats(&self) -> SchemaStats {
                self.reader.stats()
            }

            /// The schema it reads.
            pub fn schema(&self) -> &str {
                &self.reader.schema
            }
        }
    };
}

/// Avro messages of any revision of one schema into `T`, by Avro's schema resolution to the
/// reader revision ([`Schemas::avro`]). Both encodings (binary, Avro's JSON). Each writer
/// revision is fetched once per process (the [`Schemas`] cache) and prepared once per decoder.
pub struct AvroDecoder<T: DeserializeOwned + 'static> {
    reader: Arc<Reader<AvroFormat<T>>>,
}
decoder!(AvroDecoder, T: [DeserializeOwned + 'static]);

impl<T: DeserializeOwned + 'static> AvroDecoder<T> {
    /// The revision every message is resolved to.
    pub fn reader_revision(&self) -> &str {
        self.reader.format.reader_revision()
    }
}

/// Protocol Buffers messages into the `prost` type `M` ([`Schemas::protobuf`]). Binary
/// messages are decoded without their revision (field numbers keep revisions compatible);
/// proto3 JSON messages are read by their revision's definition, fetched once per process.
pub struct ProtobufDecoder<M: prost::Message + Default + 'static> {
    reader: Arc<Reader<ProtobufFormat<M>>>,
}
decoder!(ProtobufDecoder, M: [prost::Message + Default + 'static]);

/// Protocol Buffers messages into the serde type `T` ([`Schemas::protobuf_serde`]), through a
/// dynamic message built from the revision's `.proto` definition, parsed at run time: `T`'s
/// fields are the `.proto`'s field names (not proto3 JSON's camelCase), every field present
/// (proto3's defaults written out), 64-bit integers as numbers, enums by name.
pub struct ProtobufSerdeDecoder<T: DeserializeOwned + 'static> {
    reader: Arc<Reader<ProtobufSerdeFormat<T>>>,
}
decoder!(ProtobufSerdeDecoder, T: [DeserializeOwned + 'static]);

/// Messages into the serde type `T`, whichever the schema's type ([`Schemas::decoder`]): an
/// [`AvroDecoder`] for an Avro schema, a [`ProtobufSerdeDecoder`] for a Protocol Buffers one.
pub enum SerdeDecoder<T: DeserializeOwned + 'static> {
    /// The schema is an Avro schema.
    Avro(AvroDecoder<T>),
    /// The schema is a Protocol Buffers schema.
    Protobuf(ProtobufSerdeDecoder<T>),
}

impl<T: DeserializeOwned + 'static> Clone for SerdeDecoder<T> {
    fn clone(&self) -> Self {
        match self {
            Self::Avro(d) => Self::Avro(d.clone()),
            Self::Protobuf(d) => Self::Protobuf(d.clone()),
        }
    }
}

impl<T: DeserializeOwned + 'static> std::fmt::Debug for SerdeDecoder<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Avro(d) => d.fmt(f),
            Self::Protobuf(d) => d.fmt(f),
        }
    }
}

impl<T: DeserializeOwned + 'static> Decoder for SerdeDecoder<T> {
    type Output = T;

    fn prepare(&self, delivery: &Delivery) -> Option<Preparing> {
        match self {
            Self::Avro(d) => d.prepare(delivery),
            Self::Protobuf(d) => d.prepare(delivery),
        }
    }

    fn decode(&self, data: Bytes, delivery: &Delivery) -> Result<T, DecodeError> {
        match self {
            Self::Avro(d) => d.decode(data, delivery),
            Self::Protobuf(d) => d.decode(data, delivery),
        }
    }
}

impl<T: DeserializeOwned + 'static> SerdeDecoder<T> {
    /// What it counted (see [`AvroDecoder::stats`]).
    pub fn stats(&self) -> SchemaStats {
        match self {
            Self::Avro(d) => d.stats(),
            Self::Protobuf(d) => d.stats(),
        }
    }
}

/// Checks that `revision` is of the type `expected`.
fn of_type(revision: &Revision, expected: SchemaType) -> Result<(), SchemaError> {
    if revision.schema_type != expected {
        return Err(SchemaError::WrongType {
            schema: revision.schema.clone(),
            found: revision.schema_type.name(),
            expected: expected.name(),
        });
    }
    Ok(())
}

/// Checks that `revision` is of the type `F` reads, and builds its reader.
fn reader<F: Format>(
    schemas: &Schemas,
    revision: &Revision,
    format: F,
) -> Result<Arc<Reader<F>>, SchemaError> {
    of_type(revision, F::SCHEMA_TYPE)?;
    let reader = Reader::new(format, &revision.schema, schemas);
    reader.keep(revision);
    Ok(Arc::new(reader))
}

impl Schemas {
    /// A decoder of Avro messages of `schema` into `T`, resolved to `reader` (fetched now: the
    /// schema must exist and be an Avro schema).
    pub async fn avro<T: DeserializeOwned + 'static>(
        &self,
        schema: &str,
        reader: ReaderRevision,
    ) -> Result<AvroDecoder<T>, SchemaError> {
        let revision = match &reader {
            ReaderRevision::Latest => self.latest(schema).await?,
            ReaderRevision::Pinned(id) => self.revision(schema, id).await?,
        };
        of_type(&revision, SchemaType::Avro)?;
        let format = AvroFormat::new(&revision).map_err(|p| SchemaError::Invalid {
            what: revision.describe(),
            problem: p.problem,
        })?;
        Ok(AvroDecoder {
            reader: self::reader(self, &revision, format)?,
        })
    }

    /// A decoder of Protocol Buffers messages of `schema` into the `prost` type `M` (its latest
    /// revision fetched now: the schema must exist and be a Protocol Buffers schema).
    pub async fn protobuf<M: prost::Message + Default + 'static>(
        &self,
        schema: &str,
    ) -> Result<ProtobufDecoder<M>, SchemaError> {
        let latest = self.latest(schema).await?;
        Ok(ProtobufDecoder {
            reader: reader(self, &latest, ProtobufFormat::default())?,
        })
    }

    /// A decoder of Protocol Buffers messages of `schema` into the serde type `T` (its latest
    /// revision fetched now, as for [`protobuf`](Self::protobuf)).
    pub async fn protobuf_serde<T: DeserializeOwned + 'static>(
        &self,
        schema: &str,
    ) -> Result<ProtobufSerdeDecoder<T>, SchemaError> {
        let latest = self.latest(schema).await?;
        Ok(ProtobufSerdeDecoder {
            reader: reader(self, &latest, ProtobufSerdeFormat::default())?,
        })
    }

    /// A decoder of `schema`'s messages into the serde type `T`, whichever its type: Avro
    /// (resolved to `reader`) or Protocol Buffers (`reader` is not used: field numbers keep
    /// revisions compatible).
    pub async fn decoder<T: DeserializeOwned + 'static>(
        &self,
        schema: &str,
        reader: ReaderRevision,
    ) -> Result<SerdeDecoder<T>, SchemaError> {
        let latest = self.latest(schema).await?;
        Ok(match latest.schema_type {
            SchemaType::ProtocolBuffer => SerdeDecoder::Protobuf(ProtobufSerdeDecoder {
                reader: self::reader(self, &latest, ProtobufSerdeFormat::default())?,
            }),
            _ => SerdeDecoder::Avro(self.avro(schema, reader).await?),
        })
    }
}

#[cfg(test)]
mod tests;
