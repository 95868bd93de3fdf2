//! What a push request says: Pub/Sub's wrapped JSON envelope, or an unwrapped push (the payload
//! as the body, the metadata in `x-goog-pubsub-*` headers), read into one [`Pushed`].
//!
//! Owns the two formats and [`EnvelopeError`]: pure functions of the body and the headers, no
//! I/O. Uses nothing else of this crate (of the runtime, the `Received` it fills).

use base64::Engine as _;
use bytes::Bytes;
use leasehold::source::{Received, SettleHandle};
use serde::Deserialize;
use std::collections::HashMap;
use std::time::SystemTime;

/// Why a push's body or headers were not a Pub/Sub push. Answered 400 before anything runs;
/// Pub/Sub counts it a nack and redelivers (or dead-letters by its policy). The message names
/// the field, never its value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EnvelopeError {
    /// The body is not JSON of the envelope's shape (line and column of the first fault).
    #[error("the body is not a push envelope (at line {line}, column {column})")]
    NotAnEnvelope {
        /// Where the fault is.
        line: usize,
        /// Where the fault is.
        column: usize,
    },
    /// A required field is absent or empty: `message`, `message.messageId`, `subscription`, or
    /// in an unwrapped push the `x-goog-pubsub-message-id` header.
    #[error("the push has no {0}")]
    Missing(&'static str),
    /// `message.data` is not base64.
    #[error("message.data is not base64")]
    Data,
    /// A field does not hold what it must (an RFC 3339 publish time, a positive delivery
    /// attempt, text in a header).
    #[error("{0} is malformed")]
    Malformed(&'static str),
    /// The push is for another subscription than the one this endpoint serves (a push
    /// endpoint configured on the wrong subscription). The name the push gave is not kept: it
    /// is the body's text.
    #[error("the push is for another subscription than {expected}")]
    WrongSubscription {
        /// The subscription this endpoint serves.
        expected: String,
    },
}

/// One pushed message, read from its request.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Pushed {
    pub(crate) message_id: String,
    pub(crate) data: Bytes,
    pub(crate) attributes: HashMap<String, String>,
    pub(crate) ordering_key: String,
    pub(crate) publish_time: Option<SystemTime>,
    pub(crate) delivery_attempt: Option<u32>,
}

impl Pushed {
    /// The delivery the runtime takes, settled through `handle`.
    pub(crate) fn received(self, handle: Box<dyn SettleHandle>) -> Received {
        Received {
            message_id: self.message_id,
            data: self.data,
            attributes: self.attributes,
            ordering_key: self.ordering_key,
            publish_time: self.publish_time,
            delivery_attempt: self.delivery_attempt,
            handle,
        }
    }
}

impl std::fmt::Debug for Pushed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pushed")
            .field("message_id", &self.message_id)
            .field("data_len", &self.data.len())
            .field("ordering_key", &self.ordering_key)
            .field("delivery_attempt", &self.delivery_attempt)
            .finish_non_exhaustive()
    }
}

/// Pub/Sub's wrapped push body. The emulator writes both spellings of some fields; real
/// Pub/Sub writes the camel-case ones.
#[derive(Deserialize)]
struct Envelope {
    message: Option<Message>,
    subscription: Option<String>,
    #[serde(rename = "deliveryAttempt")]
    delivery_attempt: Option<i64>,
    #[serde(rename = "delivery_attempt")]
    delivery_attempt_snake: Option<i64>,
}

#[derive(Deserialize)]
struct Message {
    data: Option<String>,
    #[serde(default)]
    attributes: Option<HashMap<String, String>>,
    #[serde(rename = "messageId")]
    message_id: Option<String>,
    #[serde(rename = "message_id")]
    message_id_snake: Option<String>,
    #[serde(rename = "publishTime")]
    publish_time: Option<String>,
    #[serde(rename = "publish_time")]
    publish_time_snake: Option<String>,
    #[serde(rename = "orderingKey")]
    ordering_key: Option<String>,
    #[serde(rename = "ordering_key")]
    ordering_key_snake: Option<String>,
}

/// The first of two spellings that is present and not empty.
fn either(a: Option<String>, b: Option<String>) -> Option<String> {
    a.filter(|s| !s.is_empty())
        .or_else(|| b.filter(|s| !s.is_empty()))
}

/// Checks that the push names `expected` (`projects/P/subscriptions/S`).
fn check_subscription(expected: &str, got: Option<String>) -> Result<(), EnvelopeError> {
    let got = got
        .filter(|s| !s.is_empty())
        .ok_or(EnvelopeError::Missing("subscription"))?;
    if got != expected {
        return Err(EnvelopeError::WrongSubscription {
            expected: expected.to_string(),
        });
    }
    Ok(())
}

fn publish_time(value: Option<&str>) -> Result<Option<SystemTime>, EnvelopeError> {
    value
        .map(|t| {
            humantime::parse_rfc3339_weak(t)
                .or_else(|_| humantime::parse_rfc3339(t))
                .map_err(|_| EnvelopeError::Malformed("the publish time"))
        })
        .transpose()
}

fn delivery_attempt(value: Option<i64>) -> Result<Option<u32>, EnvelopeError> {
    value
        .map(|n| {
            u32::try_from(n)
                .ok()
                .filter(|n| *n > 0)
                .ok_or(EnvelopeError::Malformed("deliveryAttempt"))
        })
        .transpose()
}

/// Reads a wrapped push body for `subscription`.
pub(crate) fn wrapped(body: &[u8], subscription: &str) -> Result<Pushed, EnvelopeError> {
    // serde_json's own message can quote the body: only its position is kept.
    let envelope: Envelope =
        serde_json::from_slice(body).map_err(|e| EnvelopeError::NotAnEnvelope {
            line: e.line(),
            column: e.column(),
        })?;
    let message = envelope.message.ok_or(EnvelopeError::Missing("message"))?;
    check_subscription(subscription, envelope.subscription)?;
    let message_id = either(message.message_id, message.message_id_snake)
        .ok_or(EnvelopeError::Missing("message.messageId"))?;
    let data = match message.data {
        None => Bytes::new(),
        Some(text) => base64::engine::general_purpose::STANDARD
            .decode(text.as_bytes())
            .map(Bytes::from)
            .map_err(|_| EnvelopeError::Data)?,
    };
    let time = either(message.publish_time, message.publish_time_snake);
    Ok(Pushed {
        message_id,
        data,
        attributes: message.attributes.unwrap_or_default(),
        ordering_key: either(message.ordering_key, message.ordering_key_snake).unwrap_or_default(),
        publish_time: publish_time(time.as_deref())?,
        delivery_attempt: delivery_attempt(
            envelope
                .delivery_attempt
                .or(envelope.delivery_attempt_snake),
        )?,
    })
}

/// The headers of an unwrapped push that carry its metadata.
const MESSAGE_ID: &str = "x-goog-pubsub-message-id";
const PUBLISH_TIME: &str = "x-goog-pubsub-publish-time";
const SUBSCRIPTION: &str = "x-goog-pubsub-subscription-name";
const ORDERING_KEY: &str = "x-goog-pubsub-ordering-key";
const DELIVERY_ATTEMPT: &str = "x-goog-pubsub-delivery-attempt";

/// Headers of the HTTP exchange itself, never read as attributes of an unwrapped push.
const HTTP_HEADERS: &[&str] = &[
    "accept",
    "accept-encoding",
    "authorization",
    "connection",
    "content-encoding",
    "content-length",
    "content-type",
    "forwarded",
    "from",
    "host",
    "keep-alive",
    "te",
    "traceparent",
    "tracestate",
    "transfer-encoding",
    "upgrade",
    "user-agent",
    "via",
    "x-cloud-trace-context",
];

/// Whether a header belongs to HTTP or the platform rather than to the message.
fn is_transport(name: &str) -> bool {
    HTTP_HEADERS.contains(&name) || name.starts_with("x-forwarded-") || name.starts_with("x-goog-")
}

/// Reads an unwrapped push (`--push-no-wrapper` with `--push-no-wrapper-write-metadata`):
/// `body` is the payload, `headers` are `(lower-case name, value)`. The message id must be in
/// the headers: without write-metadata a push carries none, and Leasehold keys its progress
/// store and its logs on it.
pub(crate) fn unwrapped<'h>(
    body: Bytes,
    headers: impl IntoIterator<Item = (&'h str, &'h [u8])>,
    subscription: &str,
) -> Result<Pushed, EnvelopeError> {
    let mut message_id = None;
    let mut time = None;
    let mut named = None;
    let mut ordering_key = String::new();
    let mut attempt = None;
    let mut attributes = HashMap::new();
    for (name, value) in headers {
        let text = || {
            std::str::from_utf8(value)
                .map(str::to_string)
                .map_err(|_| EnvelopeError::Malformed("a header"))
        };
        match name {
            MESSAGE_ID => message_id = Some(text()?),
            PUBLISH_TIME => time = Some(text()?),
            SUBSCRIPTION => named = Some(text()?),
            ORDERING_KEY => ordering_key = text()?,
            DELIVERY_ATTEMPT => {
                let n = text()?
                    .trim()
                    .parse::<i64>()
                    .map_err(|_| EnvelopeError::Malformed("deliveryAttempt"))?;
                attempt = Some(n);
            }
            _ if is_transport(name) => {}
            // Pub/Sub's attributes are text: a header that is not is some proxy's, not one.
            _ => {
                if let Ok(value) = text() {
                    attributes.insert(name.to_string(), value);
                }
            }
        }
    }
    check_subscription(subscription, named)?;
    let message_id = either(message_id, None).ok_or(EnvelopeError::Missing(MESSAGE_ID))?;
    Ok(Pushed {
        message_id,
        data: body,
        attributes,
        ordering_key,
        publish_time: publish_time(time.as_deref())?,
        delivery_attempt: delivery_attempt(attempt)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    const SUB: &str = "projects/p/subscriptions/orders";

    #[test]
    fn a_wrapped_push_as_pub_sub_documents_it() {
        let body = br#"{
            "message": {
                "attributes": {"kind": "order"},
                "data": "aGVsbG8=",
                "messageId": "2070443601311540",
                "publishTime": "2021-02-26T19:13:55.749Z",
                "orderingKey": "customer-1"
            },
            "subscription": "projects/p/subscriptions/orders",
            "deliveryAttempt": 3
        }"#;
        let pushed = wrapped(body, SUB).unwrap();
        assert_eq!(pushed.message_id, "2070443601311540");
        assert_eq!(&pushed.data[..], b"hello");
        assert_eq!(pushed.attributes["kind"], "order");
        assert_eq!(pushed.ordering_key, "customer-1");
        assert_eq!(pushed.delivery_attempt, Some(3));
        assert_eq!(
            pushed.publish_time,
            Some(UNIX_EPOCH + Duration::from_millis(1_614_366_835_749))
        );
    }

    #[test]
    fn the_emulators_snake_case_spellings_are_read_too() {
        let body = br#"{"message": {"data": "", "message_id": "7", "messageId": "7",
            "publish_time": "2026-12-01T10:00:00.123456Z"},
            "subscription": "projects/p/subscriptions/orders"}"#;
        let pushed = wrapped(body, SUB).unwrap();
        assert_eq!(pushed.message_id, "7");
        assert!(pushed.data.is_empty());
        assert_eq!(
            pushed.delivery_attempt, None,
            "the emulator sends no attempt"
        );
        assert!(pushed.publish_time.is_some());
    }

    #[test]
    fn a_body_that_is_not_the_envelope_is_refused_without_quoting_it() {
        let err = wrapped(b"{\"message\": \"secret-payload\"}", SUB).unwrap_err();
        assert!(matches!(err, EnvelopeError::NotAnEnvelope { .. }));
        assert!(!err.to_string().contains("secret"), "{err}");
        assert!(matches!(
            wrapped(b"not json", SUB),
            Err(EnvelopeError::NotAnEnvelope { .. })
        ));
        assert_eq!(
            wrapped(
                br#"{"subscription": "projects/p/subscriptions/orders"}"#,
                SUB
            ),
            Err(EnvelopeError::Missing("message"))
        );
    }

    #[test]
    fn each_required_or_typed_field_is_checked() {
        let with = |message: &str, rest: &str| {
            format!(r#"{{"message": {message}, "subscription": "{SUB}"{rest}}}"#)
        };
        let case = |body: String| wrapped(body.as_bytes(), SUB).unwrap_err();
        assert_eq!(
            case(with(r#"{"data": "aGk="}"#, "")),
            EnvelopeError::Missing("message.messageId")
        );
        assert_eq!(
            case(with(r#"{"messageId": "1", "data": "not base64!"}"#, "")),
            EnvelopeError::Data
        );
        assert_eq!(
            case(with(
                r#"{"messageId": "1", "publishTime": "yesterday"}"#,
                ""
            )),
            EnvelopeError::Malformed("the publish time")
        );
        assert_eq!(
            case(with(r#"{"messageId": "1"}"#, r#", "deliveryAttempt": 0"#)),
            EnvelopeError::Malformed("deliveryAttempt")
        );
        assert_eq!(
            wrapped(br#"{"message": {"messageId": "1"}}"#, SUB),
            Err(EnvelopeError::Missing("subscription"))
        );
        let other =
            br#"{"message": {"messageId": "1"}, "subscription": "projects/p/subscriptions/x"}"#;
        assert!(matches!(
            wrapped(other, SUB),
            Err(EnvelopeError::WrongSubscription { .. })
        ));
    }

    #[test]
    fn an_unwrapped_push_reads_its_metadata_and_attributes_from_the_headers() {
        let headers: Vec<(&str, &[u8])> = vec![
            ("x-goog-pubsub-message-id", b"42"),
            ("x-goog-pubsub-subscription-name", SUB.as_bytes()),
            ("x-goog-pubsub-publish-time", b"2021-02-26T19:13:55.749Z"),
            ("x-goog-pubsub-delivery-attempt", b"2"),
            ("authorization", b"Bearer t"),
            ("content-type", b"application/octet-stream"),
            ("x-forwarded-for", b"10.0.0.1"),
            ("x-proxy-binary", b"\xff\xfe"),
            ("kind", b"order"),
        ];
        let pushed = unwrapped(Bytes::from_static(b"raw"), headers, SUB).unwrap();
        assert_eq!(pushed.message_id, "42");
        assert_eq!(&pushed.data[..], b"raw");
        assert_eq!(pushed.delivery_attempt, Some(2));
        assert_eq!(pushed.attributes.len(), 1, "{:?}", pushed.attributes.keys());
        assert_eq!(pushed.attributes["kind"], "order");
    }

    #[test]
    fn an_unwrapped_push_without_write_metadata_is_refused() {
        let headers: Vec<(&str, &[u8])> = vec![("content-type", b"text/plain")];
        assert_eq!(
            unwrapped(Bytes::from_static(b"raw"), headers, SUB),
            Err(EnvelopeError::Missing("subscription"))
        );
        let headers: Vec<(&str, &[u8])> = vec![("x-goog-pubsub-subscription-name", SUB.as_bytes())];
        assert_eq!(
            unwrapped(Bytes::from_static(b"raw"), headers, SUB),
            Err(EnvelopeError::Missing(MESSAGE_ID))
        );
    }
}
