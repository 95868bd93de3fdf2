//! The spans a batch makes, counted by a subscriber of this test's own. A test binary of its
//! own: tracing caches each callsite's interest process-wide, and a callsite first reached on
//! another test's thread (no subscriber there) while this test's thread-local subscriber is
//! being set can be cached as never enabled, which made the count 0 in one CI run of the
//! actors' unit tests.

use bytes::Bytes;
use leasehold::{Batch, BatchOutcome, Outcome, Registration};
use leasehold_actors::testing::{MemoryPubSub, TestMessage};
use parking_lot::Mutex;
use std::sync::Arc;
use tracing_subscriber::layer::SubscriberExt;

/// Counts the spans named `message` and `batch`.
#[derive(Clone, Default)]
struct Count(Arc<Mutex<(usize, usize)>>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Count {
    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        _: &tracing::span::Id,
        _: tracing_subscriber::layer::Context<'_, S>,
    ) {
        let mut count = self.0.lock();
        match attrs.metadata().name() {
            "message" => count.0 += 1,
            "batch" => count.1 += 1,
            _ => {}
        }
    }
}

#[actix_rt::test]
async fn a_batch_span_is_sampled_with_its_messages() {
    for (ratio, expected) in [(1.0, (2, 1)), (0.0, (0, 0))] {
        let count = Count::default();
        let subscriber = tracing_subscriber::registry().with(count.clone());
        let guard = tracing::subscriber::set_default(subscriber);
        // Handlers on this thread (`worker_threads(0)`), where the subscriber is.
        let registration =
            Registration::raw_batch("projects/p/subscriptions/spans", |_: Batch<Bytes>| async {
                BatchOutcome::all(Outcome::ack())
            })
            .max_batch_messages(2)
            .trace_sample_ratio(ratio)
            .worker_threads(0);
        let pubsub = MemoryPubSub::new();
        let sub = leasehold::start_with(registration, pubsub.connector())
            .await
            .unwrap();
        let (a, b) = (
            pubsub.publish(TestMessage::new("x").id("a")),
            pubsub.publish(TestMessage::new("x").id("b")),
        );
        let _ = (a.await, b.await);
        assert_eq!(sub.stats().batches, 1);
        sub.stop().await;
        drop(guard);
        assert_eq!(
            *count.0.lock(),
            expected,
            "(message, batch) spans at ratio {ratio}"
        );
    }
}
