//! The transactional outbox's rules, plain data: the key every outbox message carries (the same
//! at every run of the handler that published it), what Pub/Sub would refuse (checked before a
//! row is written, so the relay never holds a row it can never send), and which leased rows may
//! be sent: one ordering key's rows only from its first unsent one on, in order, so that two
//! relays never send one key's messages at once or out of commit order.
//!
//! May use: `error`.

use crate::error::OutboxError;
use std::collections::HashMap;

/// The most bytes of an attribute's value (Pub/Sub's limit): a key longer than this is refused.
pub const MAX_KEY_BYTES: usize = 1024;
/// The most bytes of an attribute's name (Pub/Sub's limit).
const MAX_ATTRIBUTE_NAME_BYTES: usize = 256;
/// The most attributes of one message (Pub/Sub's limit), the outbox's key among them.
const MAX_ATTRIBUTES: usize = 100;
/// The most bytes of an ordering key (Pub/Sub's limit).
const MAX_ORDERING_KEY_BYTES: usize = 1024;
/// The most bytes of one message, payload and attributes (Pub/Sub's limit is 10 MB for the
/// whole request; one message alone may take it).
const MAX_MESSAGE_BYTES: usize = 10_000_000;

/// The key of the `place`-th message (from 0) a handler published in one run for `source` of
/// `subscription`: the same at every run that publishes the same messages in the same order.
///
/// `source` is the key the source message's progress is kept under: its message id, or for a
/// registration that dedupes, its dedupe key `attribute=value` (a message id has no `=`). A
/// dedupe key goes in as `sha256:` and its digest in hex: an attribute's value may be up to
/// 1,024 bytes (the key would pass Pub/Sub's limit, and the relay could never send it) and may
/// be something no one downstream should read. Every copy of the source message has the same
/// dedupe key, so what a handler publishes for any of them has the same keys.
pub(crate) fn default_key(subscription: &str, source: &str, place: u32) -> String {
    if source.contains('=') {
        use sha2::Digest;
        use std::fmt::Write;
        let digest = sha2::Sha256::digest(source.as_bytes());
        let mut key = format!("{subscription}/sha256:");
        for byte in digest.iter() {
            let _ = write!(key, "{byte:02x}");
        }
        let _ = write!(key, "/{place}");
        return key;
    }
    format!("{subscription}/{source}/{place}")
}

/// The places handed out in one transaction: each source message's publishes count from 0, so
/// a batch run that groups a message with other messages than last time gives its messages the
/// same keys.
#[derive(Debug, Default, Clone)]
pub struct Places {
    next: HashMap<String, u32>,
}

impl Places {
    /// The next key for a message published for `message_id` of `subscription`.
    pub fn next_key(&mut self, subscription: &str, message_id: &str) -> String {
        let place = self.next.entry(message_id.to_string()).or_insert(0);
        let key = default_key(subscription, message_id, *place);
        *place += 1;
        key
    }

    /// How many messages were published in this transaction.
    pub fn published(&self) -> u32 {
        self.next.values().sum()
    }
}

/// Refuses a topic name Pub/Sub would: `projects/<project>/topics/<id>`, the id 3 to 255
/// letters, digits or `- _ . ~ + %`, starting with a letter and not with `goog`.
pub(crate) fn check_topic(topic: &str) -> Result<(), OutboxError> {
    let invalid = || {
        OutboxError::Invalid(format!(
            "topic {topic:?} is not projects/PROJECT/topics/TOPIC (a topic id of 3 to 255 \
             letters, digits and - _ . ~ + %, starting with a letter, not with goog)"
        ))
    };
    let parts: Vec<&str> = topic.split('/').collect();
    let [projects, project, topics, id] = parts[..] else {
        return Err(invalid());
    };
    let id_ok = (3..=255).contains(&id.len())
        && id.starts_with(|c: char| c.is_ascii_alphabetic())
        && !id.starts_with("goog")
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.~+%".contains(c));
    if projects != "projects" || project.is_empty() || topics != "topics" || !id_ok {
        return Err(invalid());
    }
    Ok(())
}

/// Refuses what Pub/Sub would refuse of a message's attributes, ordering key, key and size.
pub(crate) fn check_message(
    reserved: &str,
    attributes: &[(String, String)],
    ordering_key: &str,
    key: Option<&str>,
    data_len: usize,
) -> Result<(), OutboxError> {
    let refuse = |problem: String| Err(OutboxError::Invalid(problem));
    if attributes.len() + 1 > MAX_ATTRIBUTES {
        return refuse(format!(
            "{} attributes: at most {} besides the outbox's key",
            attributes.len(),
            MAX_ATTRIBUTES - 1
        ));
    }
    let mut size = data_len + reserved.len() + key.map_or(0, str::len);
    for (name, value) in attributes {
        if name == reserved {
            return refuse(format!(
                "the attribute {reserved} is the outbox's key: set it with key(..)"
            ));
        }
        if name.is_empty() || name.len() > MAX_ATTRIBUTE_NAME_BYTES || name.starts_with("goog") {
            return refuse(format!(
                "an attribute name must be 1 to {MAX_ATTRIBUTE_NAME_BYTES} bytes, not starting \
                 with goog ({} bytes)",
                name.len()
            ));
        }
        if value.len() > MAX_KEY_BYTES {
            // The value's length only: its text may be secret.
            return refuse(format!(
                "the value of attribute {name} has {} bytes (at most {MAX_KEY_BYTES})",
                value.len()
            ));
        }
        size += name.len() + value.len();
    }
    if ordering_key.len() > MAX_ORDERING_KEY_BYTES {
        return refuse(format!(
            "the ordering key has {} bytes (at most {MAX_ORDERING_KEY_BYTES})",
            ordering_key.len()
        ));
    }
    if let Some(key) = key
        && (key.is_empty() || key.len() > MAX_KEY_BYTES)
    {
        return refuse(format!(
            "the key has {} bytes (1 to {MAX_KEY_BYTES})",
            key.len()
        ));
    }
    if size > MAX_MESSAGE_BYTES {
        return refuse(format!(
            "the message has {size} bytes with its attributes (at most {MAX_MESSAGE_BYTES})"
        ));
    }
    Ok(())
}

/// A row a relay could lease: free (no live lease, no retry wait) and unsent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    /// The row's id.
    pub id: i64,
    /// Its topic.
    pub topic: String,
    /// Its ordering key (empty: none).
    pub ordering_key: String,
    /// Its place in its ordering key's commit order (from 1; 0 without a key).
    pub seq: i64,
}

/// Which of `candidates` a relay may lease: every row without an ordering key, and of each
/// ordering key the run of candidates that starts at the key's first unsent row (`heads`: the
/// lowest `seq` of the key's unsent rows, whoever holds them) and goes on without a gap. A key
/// whose first unsent row is not among the candidates (another relay holds it, it waits for a
/// retry, or a concurrent lease locked it) gives nothing: its rows wait for it.
///
/// The ids are in the order they should be sent: by key, in `seq` order, keyless rows as
/// given.
pub fn leasable(candidates: &[Candidate], heads: &HashMap<(String, String), i64>) -> Vec<i64> {
    let mut keyed: HashMap<(&str, &str), Vec<(i64, i64)>> = HashMap::new();
    let mut chosen = Vec::with_capacity(candidates.len());
    for c in candidates {
        if c.ordering_key.is_empty() {
            chosen.push(c.id);
        } else {
            keyed
                .entry((&c.topic, &c.ordering_key))
                .or_default()
                .push((c.seq, c.id));
        }
    }
    let mut keys: Vec<_> = keyed.into_iter().collect();
    keys.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    for ((topic, key), mut rows) in keys {
        let Some(&head) = heads.get(&(topic.to_string(), key.to_string())) else {
            continue;
        };
        rows.sort_unstable();
        for (expected, (seq, id)) in (head..).zip(rows) {
            if seq != expected {
                break;
            }
            chosen.push(id);
        }
    }
    chosen
}

#[cfg(test)]
mod tests {
    use super::*;

    fn candidate(id: i64, key: &str, seq: i64) -> Candidate {
        Candidate {
            id,
            topic: "projects/p/topics/t".into(),
            ordering_key: key.into(),
            seq,
        }
    }

    fn heads(list: &[(&str, i64)]) -> HashMap<(String, String), i64> {
        list.iter()
            .map(|(k, s)| (("projects/p/topics/t".to_string(), k.to_string()), *s))
            .collect()
    }

    #[test]
    fn a_keys_rows_are_leased_from_its_first_unsent_one_on_without_a_gap() {
        let candidates = [
            candidate(10, "", 0),
            candidate(3, "a", 2),
            candidate(2, "a", 1),
            candidate(5, "a", 4), // seq 3 is held elsewhere: 4 waits
            candidate(7, "b", 6), // b's head, 5, is not a candidate
            candidate(11, "", 0),
        ];
        let chosen = leasable(&candidates, &heads(&[("a", 1), ("b", 5)]));
        assert_eq!(chosen, [10, 11, 2, 3]);
    }

    #[test]
    fn a_key_without_a_known_head_waits() {
        assert!(leasable(&[candidate(1, "a", 1)], &HashMap::new()).is_empty());
    }

    #[test]
    fn default_keys_count_per_source_message_and_restart_with_each_transaction() {
        let mut places = Places::default();
        assert_eq!(places.next_key("s", "1"), "s/1/0");
        assert_eq!(places.next_key("s", "2"), "s/2/0");
        assert_eq!(places.next_key("s", "1"), "s/1/1");
        assert_eq!(places.published(), 3);
        let mut rerun = Places::default();
        assert_eq!(
            rerun.next_key("s", "1"),
            "s/1/0",
            "a run again gives the same keys"
        );
    }

    #[test]
    fn a_dedupe_keys_default_keys_are_a_digest_the_same_for_every_copy() {
        let subscription = format!("projects/p/subscriptions/{}", "s".repeat(255));
        let source = format!("event-id={}", "v".repeat(MAX_KEY_BYTES));
        let mut places = Places::default();
        let first = places.next_key(&subscription, &source);
        assert!(first.len() <= MAX_KEY_BYTES, "{} bytes", first.len());
        assert!(!first.contains("vvv"), "the value stays out of the key");
        assert!(first.starts_with(&format!("{subscription}/sha256:")));
        assert!(first.ends_with("/0"));
        assert_ne!(places.next_key(&subscription, &source), first);
        let mut copy = Places::default();
        assert_eq!(
            copy.next_key(&subscription, &source),
            first,
            "a copy's keys"
        );
        assert_ne!(
            Places::default().next_key(&subscription, "event-id=other"),
            first
        );
    }

    #[test]
    fn topics_are_checked_as_pub_sub_does() {
        assert!(check_topic("projects/p/topics/orders").is_ok());
        for bad in [
            "orders",
            "projects/p/topics/or",
            "projects/p/topics/goog-x",
            "projects//topics/orders",
            "projects/p/subscriptions/orders",
            "projects/p/topics/1orders",
            "projects/p/topics/ord ers",
        ] {
            assert!(check_topic(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn what_pub_sub_refuses_is_refused_and_values_are_never_quoted() {
        let ok = check_message("leasehold-key", &[("a".into(), "b".into())], "", None, 10);
        assert!(ok.is_ok());
        let reserved = check_message(
            "leasehold-key",
            &[("leasehold-key".into(), "x".into())],
            "",
            None,
            0,
        );
        assert!(reserved.unwrap_err().to_string().contains("key(..)"));
        let long = "s".repeat(2000);
        let value = check_message("leasehold-key", &[("a".into(), long.clone())], "", None, 0);
        let text = value.unwrap_err().to_string();
        assert!(
            text.contains("2000 bytes") && !text.contains("sss"),
            "{text}"
        );
        assert!(check_message("k", &[], &long, None, 0).is_err());
        assert!(check_message("k", &[], "", Some(""), 0).is_err());
        assert!(check_message("k", &[], "", Some(&long), 0).is_err());
        assert!(check_message("k", &[], "", None, 10_000_001).is_err());
        let many: Vec<_> = (0..100).map(|i| (format!("a{i}"), String::new())).collect();
        assert!(check_message("k", &many, "", None, 0).is_err());
        assert!(check_message("k", &[("googx".into(), "v".into())], "", None, 0).is_err());
    }
}
