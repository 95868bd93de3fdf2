//! Dedupe on a key: the key a message's progress is kept under, when its registration dedupes
//! on an attribute ([`Registration::dedupe_on`](crate::Registration::dedupe_on)). Pure: the
//! supervisor asks once per delivery, and the stores and the pool use what it answers.
//!
//! Pub/Sub's exactly-once delivery does not dedupe what a publisher sent twice: the copies are
//! distinct messages with distinct message ids. A publisher that sets a stable key on each event
//! (the transactional outbox sets [`OUTBOX_KEY_ATTRIBUTE`](crate::store::OUTBOX_KEY_ATTRIBUTE) on
//! every message it sends) lets a subscriber key its progress on that instead: the second copy
//! finds the first one's record.
//!
//! May use: nothing above `rules`.

use std::collections::HashMap;
use std::sync::Arc;

/// The longest attribute name accepted for [`Registration::dedupe_on`](crate::Registration::dedupe_on):
/// Pub/Sub's limit on an attribute's key.
pub(crate) const MAX_ATTRIBUTE_NAME: usize = 256;

/// The key of a message with `attributes` when its registration dedupes on `attribute`:
/// `attribute=value`, or `None` when the message does not carry it (or carries it empty), and
/// its progress is kept under its message id as without a key. The attribute's name comes first
/// so that a key never equals a message id (which has no `=`), nor a key of another attribute.
///
/// The key holds an attribute's value: it is never logged, counted by value or shown.
pub(crate) fn progress_key(
    attribute: &str,
    attributes: &HashMap<String, String>,
) -> Option<Arc<str>> {
    let value = attributes.get(attribute).filter(|v| !v.is_empty())?;
    let mut key = String::with_capacity(attribute.len() + 1 + value.len());
    key.push_str(attribute);
    key.push('=');
    key.push_str(value);
    Some(Arc::from(key))
}

/// Why `attribute` cannot be deduped on, if it cannot.
pub(crate) fn check_attribute(attribute: &str) -> Result<(), String> {
    if attribute.is_empty() || attribute.len() > MAX_ATTRIBUTE_NAME {
        return Err(format!(
            "must be an attribute's name, 1 to {MAX_ATTRIBUTE_NAME} bytes"
        ));
    }
    Ok(())
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
    fn a_message_with_the_attribute_is_keyed_on_its_name_and_value() {
        let key = progress_key(
            "event-id",
            &attributes(&[("event-id", "order-7"), ("x", "y")]),
        );
        assert_eq!(key.as_deref(), Some("event-id=order-7"));
    }

    #[test]
    fn without_it_or_with_it_empty_there_is_no_key() {
        assert_eq!(
            progress_key("event-id", &attributes(&[("other", "1")])),
            None
        );
        assert_eq!(
            progress_key("event-id", &attributes(&[("event-id", "")])),
            None
        );
    }

    #[test]
    fn a_key_is_never_a_message_id() {
        // Message ids are digits only; a registration dedupes on one attribute, so its keys
        // differ exactly when the values do.
        let numeric = progress_key("k", &attributes(&[("k", "1234567890")])).unwrap();
        assert_eq!(&*numeric, "k=1234567890");
    }

    #[test]
    fn the_attribute_name_is_checked() {
        assert!(check_attribute("leasehold-key").is_ok());
        assert!(check_attribute("").is_err());
        assert!(check_attribute(&"k".repeat(257)).is_err());
    }
}
