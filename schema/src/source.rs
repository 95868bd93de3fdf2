//! Where revisions come from: the narrow trait [`RevisionSource`] (Google's schema service
//! implements it in `google.rs`; tests and topics without a schema service use
//! [`FixedRevisions`]), and what a revision is ([`Revision`], [`SchemaType`]).

use crate::error::FetchError;
use futures::future::BoxFuture;
use parking_lot::Mutex;
use std::sync::Arc;

/// A schema's type, as Pub/Sub names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SchemaType {
    /// An Avro schema (`AVRO`).
    Avro,
    /// A Protocol Buffers schema (`PROTOCOL_BUFFER`).
    ProtocolBuffer,
}

impl SchemaType {
    /// The type as Pub/Sub writes it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Avro => "AVRO",
            Self::ProtocolBuffer => "PROTOCOL_BUFFER",
        }
    }
}

/// One revision of a schema: what the schema service answers for `name@revision`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Revision {
    /// The schema, `projects/P/schemas/S`.
    pub schema: String,
    /// The revision's id (`1a2b3c4d`).
    pub revision_id: String,
    /// Its type.
    pub schema_type: SchemaType,
    /// Its definition: Avro's JSON, or a `.proto` file.
    pub definition: String,
}

impl Revision {
    /// A revision of `schema`.
    pub fn new(
        schema: impl Into<String>,
        revision_id: impl Into<String>,
        schema_type: SchemaType,
        definition: impl Into<String>,
    ) -> Self {
        Self {
            schema: schema.into(),
            revision_id: revision_id.into(),
            schema_type,
            definition: definition.into(),
        }
    }

    /// `revision 1a2b3c4d of projects/p/schemas/orders`, for errors and logs.
    pub(crate) fn describe(&self) -> String {
        describe(&self.schema, Some(&self.revision_id))
    }
}

/// `revision R of S`, or `the latest revision of S`.
pub(crate) fn describe(schema: &str, revision: Option<&str>) -> String {
    match revision {
        Some(revision) => format!("revision {revision} of {schema}"),
        None => format!("the latest revision of {schema}"),
    }
}

/// Fetches schema revisions: Google's schema service ([`Schemas::connect`]), or anything else
/// that knows them ([`FixedRevisions`]). One call per revision the process has not seen (the
/// [`Schemas`] cache in front of it keeps what it answered).
///
/// [`Schemas`]: crate::Schemas
/// [`Schemas::connect`]: crate::Schemas::connect
pub trait RevisionSource: Send + Sync + 'static {
    /// The revision `revision` of `schema`, or its latest revision when `revision` is `None`.
    /// One attempt: the cache retries after a backoff.
    fn revision(
        &self,
        schema: &str,
        revision: Option<&str>,
    ) -> BoxFuture<'static, Result<Revision, FetchError>>;
}

/// Revisions given in code: for unit tests, and for topics whose messages carry the schema
/// attributes without a schema service that knows them (Google's emulator has no Protocol
/// Buffers schemas). The latest revision of a schema is the last one added.
///
/// ```
/// use leasehold_schema::{FixedRevisions, Revision, SchemaType};
/// let revisions = FixedRevisions::new([Revision::new(
///     "projects/p/schemas/orders",
///     "1a2b3c4d",
///     SchemaType::ProtocolBuffer,
///     r#"syntax = "proto3"; message Order { int64 id = 1; }"#,
/// )]);
/// # let _ = revisions;
/// ```
#[derive(Debug, Clone, Default)]
pub struct FixedRevisions {
    revisions: Arc<Mutex<Vec<Revision>>>,
    down: Arc<Mutex<Option<String>>>,
}

impl FixedRevisions {
    /// A source that knows `revisions`.
    pub fn new(revisions: impl IntoIterator<Item = Revision>) -> Self {
        Self {
            revisions: Arc::new(Mutex::new(revisions.into_iter().collect())),
            down: Arc::default(),
        }
    }

    /// Adds a revision: from now on it is fetched, and it is its schema's latest.
    pub fn add(&self, revision: Revision) {
        self.revisions.lock().push(revision);
    }

    /// Removes a revision, as if it had been deleted.
    pub fn remove(&self, schema: &str, revision_id: &str) {
        self.revisions
            .lock()
            .retain(|r| !(r.schema == schema && r.revision_id == revision_id));
    }

    /// Until [`answer`](Self::answer), every fetch fails as an outage would, with `why`.
    pub fn refuse(&self, why: impl Into<String>) {
        *self.down.lock() = Some(why.into());
    }

    /// Answers fetches again.
    pub fn answer(&self) {
        *self.down.lock() = None;
    }
}

impl RevisionSource for FixedRevisions {
    fn revision(
        &self,
        schema: &str,
        revision: Option<&str>,
    ) -> BoxFuture<'static, Result<Revision, FetchError>> {
        let answer = match self.down.lock().clone() {
            Some(why) => Err(FetchError::Unavailable(leasehold::error::Cause::message(
                why,
            ))),
            None => self
                .revisions
                .lock()
                .iter()
                .rev()
                .find(|r| r.schema == schema && revision.is_none_or(|id| r.revision_id == id))
                .cloned()
                .ok_or(FetchError::NotFound),
        };
        Box::pin(async move { answer })
    }
}
