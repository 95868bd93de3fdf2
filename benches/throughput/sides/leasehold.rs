//! The Leasehold side on the emulator: a no-op handler that acks, on the default progress store
//! seen through a wrapper that counts what it clears.
//!
//! Uses Leasehold's public API (`Registration`, `start`, `store`), and the clock and the
//! completion signal of the harness.

use crate::harness::clock::{Clock, Run};
use crate::harness::countdown::Countdown;
use leasehold::store::{Completed, MemoryStore, ProgressStore, StoreError};
use leasehold::{Connection, Delivery, Registration};
use std::sync::Arc;

/// The default progress store ([`MemoryStore`]) with a count of the records it clears: the
/// runtime clears a record when Pub/Sub confirms its message's ack (exactly-once subscriptions),
/// so its count is the confirmed acks, and the Leasehold side's exactly-once runs end on it. The
/// same store runs on at-least-once subscriptions, where nothing is cleared: both delivery types
/// run one configuration.
struct CountingClears {
    store: MemoryStore,
    cleared: Arc<Countdown>,
}

impl ProgressStore for CountingClears {
    fn completed(&self, message_id: &str) -> Result<Option<Completed>, StoreError> {
        self.store.completed(message_id)
    }

    fn record(
        &self,
        message_id: &str,
        completed: Completed,
    ) -> futures::future::BoxFuture<'static, Result<(), StoreError>> {
        self.store.record(message_id, completed)
    }

    fn clear(&self, message_id: &str) {
        self.store.clear(message_id);
        self.cleared.count();
    }
}

/// Leasehold: a no-op handler that acks, `streams` streams, 64 workers. The run ends when the
/// handler has acked `messages` messages (at-least-once: the progress store replays a
/// redelivery of a finished message without the handler, so these are distinct messages) or,
/// on exactly-once subscriptions, when Pub/Sub has confirmed `messages` acks (the store's
/// clears); the last count wakes the measurement ([`Countdown`]).
pub(crate) async fn with_leasehold(
    connection: &Connection,
    subscription: &str,
    streams: usize,
    messages: u64,
) -> Run {
    let handled = Arc::new(Countdown::new(messages));
    let confirmed = Arc::new(Countdown::new(messages));
    let counted = handled.clone();
    let registration = super::worker_threads_from_env(
        Registration::raw(subscription, move |_, d: Delivery| {
            counted.count();
            async move { d.ack() }
        })
        .streams(streams)
        .workers(64)
        .progress_store(CountingClears {
            store: MemoryStore::default(),
            cleared: confirmed.clone(),
        }),
    );
    // `LEASEHOLD_BENCH_NO_STORE`: no progress store, to measure what the default store costs
    // (at-least-once: nothing then counts confirmations, and the run ends on the handler's
    // count whatever the delivery type).
    let without_store = std::env::var_os("LEASEHOLD_BENCH_NO_STORE").is_some();
    let registration = if without_store {
        registration.without_progress_store()
    } else {
        registration
    };
    // As for the plain loop, building the clients is outside the measurement: the stream opens
    // after `start` returns, when the supervisor starts.
    let sub = leasehold::start(registration, connection).await.unwrap();
    let clock = Clock::start();
    let exactly_once = sub.info().is_some_and(|i| i.exactly_once);
    if exactly_once && !without_store {
        confirmed.reached().await;
    } else {
        handled.reached().await;
    }
    let run = clock.stop(messages as f64);
    sub.stop().await;
    run
}
