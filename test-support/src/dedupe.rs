//! The dedupe contract every progress store follows, as one test each store's crate runs with
//! its own registration: a publisher that sends one event twice (two messages, two message ids,
//! one key attribute) has it handled once, on an exactly-once subscription (whose exactly-once
//! delivery does not dedupe what a publisher sent twice).

use crate::{Scratch, eventually};
use leasehold::Registration;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// The attribute the contract's registrations dedupe on.
pub const DEDUPE_KEY: &str = "event-id";

/// What one run of the contract saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deduped {
    /// Handler runs: the event once, and the message without a key once.
    pub runs: usize,
    /// The subscription's `deduplicated` and `dedupe_fallbacks` counters.
    pub deduplicated: u64,
    /// Deliveries kept under their message id: the one without a key.
    pub fallbacks: u64,
}

/// Publishes one event twice (the same key, two message ids) and one message without the key
/// to an exactly-once subscription of its own, consumed by `registration`, built with the
/// subscription's name and a counter its handler must add one to per run (it should ack; it is
/// given [`DEDUPE_KEY`] to dedupe on here). Waits until the three are acked, then checks that the
/// event ran once: a store that keys on the message id runs it twice and fails.
pub async fn published_twice_runs_once(
    registration: impl FnOnce(&str, Arc<AtomicUsize>) -> Registration,
) -> Deduped {
    let scratch = Scratch::new(|s| s.set_enable_exactly_once_delivery(true)).await;
    let runs = Arc::new(AtomicUsize::new(0));
    let sub = leasehold::start(
        registration(&scratch.subscription, runs.clone()).dedupe_on(DEDUPE_KEY),
        &scratch.connection,
    )
    .await
    .unwrap();
    // The first copy is handled before the second is published: the second finds its record
    // (a copy that comes while the first runs waits for it, which the unit tests check).
    let first = scratch
        .publish_with("order-7", &[(DEDUPE_KEY, "order-7")])
        .await;
    eventually("the first copy acked", Duration::from_secs(60), || {
        sub.stats().acked == 1
    })
    .await;
    let second = scratch
        .publish_with("order-7", &[(DEDUPE_KEY, "order-7")])
        .await;
    assert_ne!(first, second, "two publishes, two message ids");
    scratch.publish_with("no key", &[]).await;
    eventually(
        "the copy and the keyless one acked",
        Duration::from_secs(60),
        || sub.stats().acked == 3,
    )
    .await;
    sub.stop().await;
    scratch.cleanup().await;
    let stats = sub.stats();
    let seen = Deduped {
        runs: runs.load(Ordering::SeqCst),
        deduplicated: stats.deduplicated,
        fallbacks: stats.dedupe_fallbacks,
    };
    assert_eq!(
        seen,
        Deduped {
            runs: 2,
            deduplicated: 1,
            fallbacks: 1
        },
        "the event ran once, the copy was settled from its record"
    );
    seen
}
