//! The three attributes Pub/Sub sets on every message of a topic with a schema
//! (`googclient_schemaname`, `googclient_schemarevisionid`, `googclient_schemaencoding`), read
//! into a [`Stamp`], and how a revision id may be shown in logs and metrics.

use std::collections::HashMap;

/// The schema's name, `projects/P/schemas/S`.
pub(crate) const SCHEMA_NAME: &str = "googclient_schemaname";
/// The revision the message was written with.
pub(crate) const SCHEMA_REVISION: &str = "googclient_schemarevisionid";
/// `BINARY` or `JSON`.
pub(crate) const SCHEMA_ENCODING: &str = "googclient_schemaencoding";

/// How a topic's messages are encoded, as its schema settings say.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Encoding {
    /// Avro's binary encoding, or Protocol Buffers' wire format (`BINARY`).
    Binary,
    /// Avro's JSON encoding, or proto3's JSON mapping (`JSON`).
    Json,
}

impl Encoding {
    /// The encoding as Pub/Sub writes it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Binary => "BINARY",
            Self::Json => "JSON",
        }
    }
}

/// What a message's schema attributes say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stamp<'a> {
    pub(crate) schema: &'a str,
    pub(crate) revision: &'a str,
    pub(crate) encoding: Encoding,
}

/// Why a message has no usable stamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unstamped {
    /// This attribute is missing.
    Missing(&'static str),
    /// `googclient_schemaencoding` is neither `BINARY` nor `JSON`.
    Encoding,
}

impl Unstamped {
    /// In words, quoting no attribute's value.
    pub(crate) fn problem(self) -> String {
        match self {
            Self::Missing(attribute) => format!(
                "the message has no {attribute} attribute (published to a topic without this \
                 schema?)"
            ),
            Self::Encoding => format!("{SCHEMA_ENCODING} is neither BINARY nor JSON"),
        }
    }
}

/// The stamp of a message with these attributes.
pub(crate) fn stamp(attributes: &HashMap<String, String>) -> Result<Stamp<'_>, Unstamped> {
    let get = |name| {
        attributes
            .get(name)
            .map(String::as_str)
            .ok_or(Unstamped::Missing(name))
    };
    let schema = get(SCHEMA_NAME)?;
    let revision = get(SCHEMA_REVISION)?;
    let encoding = match get(SCHEMA_ENCODING)? {
        "BINARY" => Encoding::Binary,
        "JSON" => Encoding::Json,
        _ => return Err(Unstamped::Encoding),
    };
    Ok(Stamp {
        schema,
        revision,
        encoding,
    })
}

/// What stands in for a revision id that is not Pub/Sub's.
pub(crate) const NOT_A_REVISION_ID: &str = "(not a revision id)";

/// A revision id as logs and metrics may show it: Pub/Sub's own ids are 8 lowercase hex digits;
/// anything else is an attribute a publisher set on a topic without a schema, and is not
/// repeated.
pub(crate) fn shown(revision: &str) -> &str {
    let pubsubs = revision.len() == 8
        && revision
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    if pubsubs { revision } else { NOT_A_REVISION_ID }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attributes(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_stamp_needs_all_three_attributes_and_a_known_encoding() {
        let full = attributes(&[
            (SCHEMA_NAME, "projects/p/schemas/s"),
            (SCHEMA_REVISION, "1a2b3c4d"),
            (SCHEMA_ENCODING, "JSON"),
        ]);
        assert_eq!(
            stamp(&full),
            Ok(Stamp {
                schema: "projects/p/schemas/s",
                revision: "1a2b3c4d",
                encoding: Encoding::Json
            })
        );
        let mut no_revision = full.clone();
        no_revision.remove(SCHEMA_REVISION);
        assert_eq!(
            stamp(&no_revision),
            Err(Unstamped::Missing(SCHEMA_REVISION))
        );
        let mut odd = full;
        odd.insert(SCHEMA_ENCODING.into(), "4111-1111".into());
        let problem = stamp(&odd).unwrap_err().problem();
        assert!(!problem.contains("4111"), "{problem}");
    }

    #[test]
    fn only_pubsubs_revision_ids_are_shown() {
        assert_eq!(shown("1a2b3c4d"), "1a2b3c4d");
        for odd in ["4111111111111111", "1A2B3C4D", "secret", "", "1a2b3c4"] {
            assert_eq!(shown(odd), NOT_A_REVISION_ID, "{odd}");
        }
    }
}
