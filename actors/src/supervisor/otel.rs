//! Feature `otel`: a message's span continues the publisher's trace.
//!
//! Google's publishers (every language) put the W3C trace context of the publish span in the
//! message attributes `googclient_traceparent` and `googclient_tracestate`. With the
//! `tracing-opentelemetry` layer installed, the message's `<subscription> process` span takes
//! that context as its parent, so one trace runs from the publisher through the handler.

use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use std::collections::HashMap;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The attribute Google's publishers carry the `traceparent` in.
pub(crate) use crate::source::TRACEPARENT_ATTRIBUTE;
/// The attribute Google's publishers carry the `tracestate` in.
pub(crate) const TRACESTATE_ATTRIBUTE: &str = "googclient_tracestate";

/// The message's attributes, read as a W3C trace-context carrier.
struct Attributes<'a>(&'a HashMap<String, String>);

impl Extractor for Attributes<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        let attribute = match key {
            "traceparent" => TRACEPARENT_ATTRIBUTE,
            "tracestate" => TRACESTATE_ATTRIBUTE,
            _ => return None,
        };
        self.0.get(attribute).map(String::as_str)
    }

    fn keys(&self) -> Vec<&str> {
        vec!["traceparent", "tracestate"]
    }
}

/// Makes the publisher's span (from the attributes) the parent of `span`, when both exist.
pub(crate) fn continue_trace(span: &tracing::Span, attributes: &HashMap<String, String>) {
    if span.is_disabled() || !attributes.contains_key(TRACEPARENT_ATTRIBUTE) {
        return;
    }
    let parent = TraceContextPropagator::new().extract(&Attributes(attributes));
    // Fails only when no OpenTelemetry layer is installed: nothing to continue then.
    let _ = span.set_parent(parent);
}
