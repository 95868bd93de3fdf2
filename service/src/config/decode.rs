//! A subscription's schema in the service: the `decode = { ... }` table of
//! `[subscriptions.KEY]`, read by the handlers bound with `Service::schema` and its siblings
//! (`leasehold-schema`'s decoders). The schema and the topic are checked when the service
//! starts, where the decoder is built (`builder.rs`).

use leasehold_schema::ReaderRevision;
use serde::Deserialize;

/// How a subscription's messages are decoded (`decode = { schema = "projects/P/schemas/S" }`):
/// with the revision each was written with, into the bound handler's type.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct DecodeConfig {
    /// The schema, `projects/P/schemas/S`: it must exist, and be the subscription's topic's
    /// (unless `topic = "plain"`).
    pub schema: String,
    /// Avro: the revision every message is read as, `"latest"` (the latest when the service
    /// starts; the default) or a revision id. Protocol Buffers schemas do not use it.
    pub reader_revision: Option<String>,
    /// `"schema"` (the default): the subscription's topic must have this schema, with an
    /// encoding the decoders read. `"plain"`: a topic without a schema, whose publishers set
    /// the three `googclient_schema*` attributes themselves; not checked.
    #[serde(default)]
    pub topic: TopicKind,
}

/// What the subscription's topic is: `decode.topic`.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum TopicKind {
    /// The topic has the schema (checked at start).
    #[default]
    Schema,
    /// The topic has no schema; its publishers stamp the messages.
    Plain,
}

impl DecodeConfig {
    /// The revision an Avro decoder reads as.
    pub fn reader(&self) -> ReaderRevision {
        match self.reader_revision.as_deref() {
            None | Some("latest") => ReaderRevision::Latest,
            Some(id) => ReaderRevision::Pinned(id.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latest_is_the_default_reader_and_a_schema_topic_the_default_topic() {
        let table: DecodeConfig =
            serde_json::from_str(r#"{"schema":"projects/p/schemas/s"}"#).unwrap();
        assert_eq!(table.reader(), ReaderRevision::Latest);
        assert_eq!(table.topic, TopicKind::Schema);
        let pinned: DecodeConfig = serde_json::from_str(
            r#"{"schema":"projects/p/schemas/s","reader_revision":"1a2b3c4d","topic":"plain"}"#,
        )
        .unwrap();
        assert_eq!(pinned.reader(), ReaderRevision::Pinned("1a2b3c4d".into()));
        assert_eq!(pinned.topic, TopicKind::Plain);
        assert!(serde_json::from_str::<DecodeConfig>(r#"{"schema":"s","encoding":"x"}"#).is_err());
    }
}
