//! What every decoder of this crate does around its format ([`Reader`]): read the message's
//! schema attributes, fetch the revision it was written with (once per decoder, through the
//! process's [`Schemas`]), prepare it for the format ([`Format::compile`]), decode, and count
//! per revision. The formats (`avro/`, `protobuf/`) only turn bytes into values.

use crate::attributes::{Encoding, NOT_A_REVISION_ID, Stamp, shown, stamp};
use crate::cache::{Failure, Schemas};
use crate::source::{Revision, SchemaType, describe};
use crate::stats::{Counts, ReaderStats, SchemaStats, bump};
use bytes::Bytes;
use leasehold::error::Cause;
use leasehold::{DecodeError, Delivery, Preparing};
use parking_lot::RwLock;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// The most writer revisions one decoder keeps prepared; past it, it forgets them all and
/// prepares again what comes (from the process's cache, without a fetch).
const MAX_PREPARED: usize = 64;

/// The longest field path a problem names: deeper nesting keeps the innermost part.
const MAX_FIELD: usize = 120;

/// Where and why a payload did not decode, quoting no value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Problem {
    /// The field (`items[2].price`), when known.
    pub(crate) field: Option<String>,
    /// What went wrong.
    pub(crate) problem: String,
}

impl Problem {
    pub(crate) fn new(problem: impl Into<String>) -> Self {
        Self {
            field: None,
            problem: problem.into(),
        }
    }

    /// A problem at `field`; a path longer than [`MAX_FIELD`] characters keeps its end.
    pub(crate) fn at(field: impl Into<String>, problem: impl Into<String>) -> Self {
        let mut field: String = field.into();
        if field.len() > MAX_FIELD {
            let mut cut = field.len() - MAX_FIELD;
            while !field.is_char_boundary(cut) {
                cut += 1;
            }
            field = format!("…{}", &field[cut..]);
        }
        Self {
            field: Some(field).filter(|f| !f.is_empty()),
            problem: problem.into(),
        }
    }
}

/// One schema type's decoding: Avro into a serde type, Protocol Buffers into a `prost` type or a
/// serde type.
pub(crate) trait Format: Send + Sync + 'static {
    /// What the handler gets.
    type Output: 'static;
    /// A writer revision, prepared for decoding.
    type Compiled: Send + Sync + 'static;
    /// The schema type it reads.
    const SCHEMA_TYPE: SchemaType;

    /// Whether messages of `encoding` need the revision they were written with.
    fn needs_revision(&self, encoding: Encoding) -> bool {
        let _ = encoding;
        true
    }

    /// Prepares a writer revision (parses it, and so on): `Err` fails each of its messages.
    fn compile(&self, revision: &Revision) -> Result<Self::Compiled, Problem>;

    /// Decodes one payload (`compiled`: its writer revision, when the encoding needs it).
    fn decode(
        &self,
        compiled: Option<&Self::Compiled>,
        encoding: Encoding,
        data: &[u8],
    ) -> Result<Self::Output, Problem>;
}

/// A writer revision as a decoder keeps it.
struct Prepared<C> {
    revision_id: Arc<str>,
    compiled: Result<C, Problem>,
    counts: Arc<Counts>,
}

/// A decoder of one schema in one format.
pub(crate) struct Reader<F: Format> {
    pub(crate) format: F,
    pub(crate) schema: Arc<str>,
    schemas: Schemas,
    stats: Arc<ReaderStats>,
    prepared: RwLock<PreparedRevisions<F::Compiled>>,
}

/// The writer revisions a decoder prepared, by id.
type PreparedRevisions<C> = HashMap<Arc<str>, Arc<Prepared<C>>>;

impl<F: Format> Reader<F> {
    pub(crate) fn new(format: F, schema: &str, schemas: &Schemas) -> Self {
        Self {
            format,
            schema: Arc::from(schema),
            schemas: schemas.clone(),
            stats: Arc::new(ReaderStats::new(schema)),
            prepared: RwLock::default(),
        }
    }

    pub(crate) fn stats(&self) -> SchemaStats {
        SchemaStats(self.stats.clone())
    }

    /// Keeps `revision` prepared (the reader's own revision, fetched at start).
    pub(crate) fn keep(&self, revision: &Revision) {
        self.insert(revision);
    }

    /// The fetch `delivery` needs first: its revision, when this decoder has not prepared it and
    /// its encoding needs it.
    pub(crate) fn prepare(self: &Arc<Self>, delivery: &Delivery) -> Option<Preparing> {
        let stamp = stamp(delivery.attributes()).ok()?;
        let ours = stamp.schema == &*self.schema;
        if !ours || !self.format.needs_revision(stamp.encoding) {
            // Decoded (or refused) without a revision.
            return None;
        }
        if self.prepared.read().contains_key(stamp.revision) {
            return None;
        }
        let (reader, revision) = (self.clone(), stamp.revision.to_string());
        Some(Box::pin(async move { reader.fetch(&revision).await }))
    }

    /// Fetches and prepares `revision`.
    async fn fetch(&self, revision: &str) -> Result<(), DecodeError> {
        match self
            .schemas
            .lookup_for(&self.schema, revision, &self.stats)
            .await
        {
            Ok(found) => {
                self.insert(&found);
                Ok(())
            }
            Err(Failure::Missing) => {
                bump(&self.stats.unresolved);
                Err(self.refused(
                    shown(revision),
                    Problem::new(
                        "the schema service has no such revision (deleted, or never committed)",
                    ),
                ))
            }
            Err(Failure::Unavailable { cause, retry_in }) => Err(DecodeError::Unavailable {
                what: describe(&self.schema, Some(shown(revision))),
                retry_in,
                cause,
            }),
        }
    }

    /// Prepares `revision` and keeps it.
    fn insert(&self, revision: &Revision) {
        let compiled = if revision.schema_type == F::SCHEMA_TYPE {
            self.format.compile(revision)
        } else {
            Err(Problem::new(format!(
                "the revision is a {} schema; this decoder reads {}",
                revision.schema_type.name(),
                F::SCHEMA_TYPE.name()
            )))
        };
        let id: Arc<str> = Arc::from(revision.revision_id.as_str());
        let prepared = Arc::new(Prepared {
            revision_id: id.clone(),
            compiled,
            counts: self.stats.counts_of_known(&id),
        });
        let mut kept = self.prepared.write();
        if kept.len() >= MAX_PREPARED {
            kept.clear();
        }
        kept.insert(id, prepared);
    }

    /// Decodes one payload with the revision its attributes name.
    pub(crate) fn decode(
        &self,
        data: Bytes,
        delivery: &Delivery,
    ) -> Result<F::Output, DecodeError> {
        let stamp = match stamp(delivery.attributes()) {
            Ok(stamp) if stamp.schema == &*self.schema => stamp,
            Ok(_) => {
                bump(&self.stats.unresolved);
                return Err(self.refused(
                    NOT_A_REVISION_ID,
                    Problem::new("the message was written with another schema"),
                ));
            }
            Err(unstamped) => {
                bump(&self.stats.unresolved);
                return Err(self.refused("none", Problem::new(unstamped.problem())));
            }
        };
        let prepared = self.prepared.read().get(stamp.revision).cloned();
        let Some(prepared) = prepared else {
            return self.decode_unprepared(&data, stamp);
        };
        let compiled = match &prepared.compiled {
            Ok(compiled) => compiled,
            Err(problem) => {
                bump(&prepared.counts.failed);
                return Err(self.refused(&prepared.revision_id, problem.clone()));
            }
        };
        match self.format.decode(Some(compiled), stamp.encoding, &data) {
            Ok(value) => {
                bump(&prepared.counts.decoded);
                Ok(value)
            }
            Err(problem) => {
                bump(&prepared.counts.failed);
                Err(self.refused(&prepared.revision_id, problem))
            }
        }
    }

    /// A payload whose revision this decoder has not prepared: decoded without it when its
    /// encoding allows, else retried (its fetch did not run: a decoder called by hand).
    fn decode_unprepared(&self, data: &[u8], stamp: Stamp<'_>) -> Result<F::Output, DecodeError> {
        if self.format.needs_revision(stamp.encoding) {
            return Err(DecodeError::Unavailable {
                what: describe(&self.schema, Some(shown(stamp.revision))),
                retry_in: Duration::ZERO,
                cause: Cause::message("the revision was not fetched before decoding"),
            });
        }
        let counts = self.stats.counts(stamp.revision);
        match self.format.decode(None, stamp.encoding, data) {
            Ok(value) => {
                bump(&counts.decoded);
                Ok(value)
            }
            Err(problem) => {
                bump(&counts.failed);
                Err(self.refused(shown(stamp.revision), problem))
            }
        }
    }

    /// The failure policy's error for a message of `revision`.
    fn refused(&self, revision: &str, problem: Problem) -> DecodeError {
        DecodeError::Schema {
            schema: self.schema.to_string(),
            revision: revision.to_string(),
            field: problem.field,
            problem: problem.problem,
        }
    }
}

/// A serde path as a problem's field: names and indices; a map's key that is not a plain name
/// (it may be a value) as `[…]`.
pub(crate) fn field_of(path: &serde_path_to_error::Path) -> String {
    use serde_path_to_error::Segment;
    let mut field = String::new();
    for segment in path.iter() {
        match segment {
            Segment::Seq { index } => field.push_str(&format!("[{index}]")),
            Segment::Map { key } | Segment::Enum { variant: key } if is_name(key) => {
                if !field.is_empty() {
                    field.push('.');
                }
                field.push_str(key);
            }
            Segment::Map { .. } | Segment::Enum { .. } | Segment::Unknown => field.push_str("[…]"),
        }
    }
    field
}

/// Whether `key` reads as a field's name (letters, digits, `_`; at most 64).
fn is_name(key: &str) -> bool {
    !key.is_empty()
        && key.len() <= 64
        && !key.starts_with(|c: char| c.is_ascii_digit())
        && key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// A JSON payload that does not parse: where, and what kind of failure, never serde's text.
pub(crate) fn json_problem(error: &serde_json::Error) -> Problem {
    use serde_json::error::Category;
    let category = match error.classify() {
        Category::Io => "io",
        Category::Syntax => "syntax",
        Category::Data => "data",
        Category::Eof => "eof",
    };
    Problem::new(format!(
        "not the revision's JSON: {category} error at line {}, column {}",
        error.line(),
        error.column()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_keeps_names_and_indices_and_hides_other_keys() {
        #[derive(Debug, serde::Deserialize)]
        #[allow(dead_code)]
        struct Order {
            lines: Vec<std::collections::HashMap<String, u32>>,
        }
        let json = r#"{"lines":[{"a":1},{"4111 1111":"x"}]}"#;
        let e = serde_path_to_error::deserialize::<_, Order>(
            &mut serde_json::Deserializer::from_str(json),
        )
        .unwrap_err();
        assert_eq!(field_of(e.path()), "lines[1][…]");
        let plain = r#"{"lines":[{"price":"x"}]}"#;
        let e = serde_path_to_error::deserialize::<_, Order>(
            &mut serde_json::Deserializer::from_str(plain),
        )
        .unwrap_err();
        assert_eq!(field_of(e.path()), "lines[0].price");
    }
}
