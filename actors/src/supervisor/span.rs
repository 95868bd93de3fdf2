//! Each message's span, as OpenTelemetry's messaging conventions for Pub/Sub name it.
//!
//! The span is named `<subscription id> process` and carries the attributes Google's other
//! clients set; the result (`messaging.gcp_pubsub.result`) is recorded when the lease actor
//! settles the message. It is at debug level: at info, merely logging at info would make every
//! message build and format a span (+3 µs and 8 allocations a message, measured). Warnings and
//! errors about a message name it in their own fields. A share of the messages is traced
//! (`trace_sample_ratio`), and always those whose publisher sampled its trace.

use std::collections::HashMap;
use std::sync::Arc;

/// What every message span of one subscription shares.
#[derive(Debug)]
pub(crate) struct Spans {
    /// The subscription's full name.
    subscription: Arc<str>,
    /// `<subscription id> process`.
    name: Arc<str>,
    /// The share of messages that get a span.
    sample_ratio: f64,
}

impl Spans {
    pub(crate) fn new(subscription: Arc<str>, sample_ratio: f64) -> Self {
        let id = subscription.rsplit('/').next().unwrap_or(&subscription);
        Self {
            name: Arc::from(format!("{id} process")),
            subscription,
            sample_ratio,
        }
    }

    /// The span of one message: disabled when the message is not sampled (or nothing listens
    /// at debug level).
    pub(crate) fn message(
        &self,
        message_id: &str,
        attempt: Option<u32>,
        ordering_key: &str,
        attributes: &HashMap<String, String>,
    ) -> tracing::Span {
        let traced = self.sample_ratio >= 1.0
            || publisher_sampled(attributes)
            || fastrand::f64() < self.sample_ratio;
        if !traced {
            return tracing::Span::none();
        }
        let span = tracing::debug_span!("message",
            subscription = %self.subscription,
            %message_id,
            attempt = ?attempt,
            otel.name = %self.name,
            otel.kind = "consumer",
            messaging.system = "gcp_pubsub",
            messaging.operation.type = "process",
            messaging.destination.name = %self.subscription,
            messaging.message.id = %message_id,
            messaging.gcp_pubsub.message.delivery_attempt = attempt.map(i64::from),
            messaging.gcp_pubsub.message.ordering_key = tracing::field::Empty,
            messaging.gcp_pubsub.result = tracing::field::Empty);
        if !ordering_key.is_empty() {
            span.record("messaging.gcp_pubsub.message.ordering_key", ordering_key);
        }
        #[cfg(feature = "otel")]
        crate::supervisor::otel::continue_trace(&span, attributes);
        span
    }
}

/// Whether the publisher sampled the message's trace: the flags of the W3C `traceparent` in the
/// `googclient_traceparent` attribute (`00-<trace id>-<span id>-<flags>`, bit 0 sampled).
pub(crate) fn publisher_sampled(attributes: &HashMap<String, String>) -> bool {
    attributes
        .get(crate::source::TRACEPARENT_ATTRIBUTE)
        .and_then(|traceparent| traceparent.rsplit('-').next())
        .and_then(|flags| u8::from_str_radix(flags, 16).ok())
        .is_some_and(|flags| flags & 1 == 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attributes(traceparent: &str) -> HashMap<String, String> {
        HashMap::from([(
            crate::source::TRACEPARENT_ATTRIBUTE.to_string(),
            traceparent.to_string(),
        )])
    }

    #[test]
    fn the_publishers_sampled_flag_is_read_from_the_traceparent() {
        let id = "4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7";
        assert!(publisher_sampled(&attributes(&format!("00-{id}-01"))));
        assert!(!publisher_sampled(&attributes(&format!("00-{id}-00"))));
        assert!(!publisher_sampled(&attributes("garbage")));
        assert!(!publisher_sampled(&HashMap::new()));
    }

    #[test]
    fn spans_are_named_after_the_subscription_id() {
        let spans = Spans::new("projects/p/subscriptions/orders".into(), 0.0);
        assert_eq!(&*spans.name, "orders process");
        // Not sampled, and no publisher sampled it: no span.
        assert!(spans.message("1", None, "", &HashMap::new()).is_none());
    }
}
