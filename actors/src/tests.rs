//! The whole actor pipeline on the in-memory Pub/Sub (`testing::MemoryPubSub`), with paused
//! time: one harness, one module per concern under `tests/`.

pub(crate) use crate::error::{ReadError, SourceError, StartError};
pub(crate) use crate::rules::outcome::Action;
pub(crate) use crate::source::Connector;
pub(crate) use crate::status::shared::State;
pub(crate) use crate::supervisor::actor::SubscriptionActor;
pub(crate) use crate::supervisor::actor::tests::Sabotage;
pub(crate) use crate::supervisor::subscription::Subscription;
pub(crate) use crate::testing::{MemoryPubSub, Published, ReadAnswer, TestMessage};
pub(crate) use crate::{Delivery, Outcome, PanicPolicy, Registration};
pub(crate) use actix::{Actor, Addr};
pub(crate) use bytes::Bytes;
pub(crate) use futures::FutureExt;
pub(crate) use parking_lot::Mutex;
pub(crate) use std::rc::Rc;
pub(crate) use std::sync::Arc;
pub(crate) use std::time::Duration;
pub(crate) use tokio::time::Instant;

mod batches;
mod breaker;
mod decoders;
mod dedupe;
mod flow;
mod observing;
mod outcomes;
mod progress;
mod scheduling;
mod settler;
mod starting;
mod stopping;
mod streams;
mod supervision;
mod transactional;

/// Starts a subscription whose handlers run on the test's own arbiter (`worker_threads(0)`),
/// so that paused time governs them too.
pub(crate) async fn start(
    registration: Registration,
    connector: Rc<dyn Connector>,
) -> Result<Subscription, StartError> {
    crate::start(registration.worker_threads(0), connector).await
}

/// Like [`start`], and the supervisor's address too, to sabotage it.
pub(crate) async fn start_actor(
    registration: Registration,
    connector: Rc<dyn Connector>,
) -> (Subscription, Addr<SubscriptionActor>) {
    let actor = SubscriptionActor::new(registration.worker_threads(0), connector)
        .await
        .unwrap();
    let subscription = actor.subscription();
    (subscription, actor.start())
}

pub(crate) const SUB: &str = "projects/p/subscriptions/orders";

/// A message with payload `data` and message id `id`.
pub(crate) fn message(id: &str, data: &str) -> TestMessage {
    TestMessage::new(data.to_string()).id(id)
}

/// Polls `done` in paused time, failing after a virtual minute.
pub(crate) async fn eventually(what: &str, done: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Whether the message was settled (acked, nacked or dropped unsettled).
pub(crate) fn is_settled(published: &Published) -> bool {
    published.action().is_some()
}

/// Waits until every message was settled (acked, nacked or dropped unsettled).
pub(crate) async fn settled<'a>(all: impl IntoIterator<Item = &'a Published>) {
    let all: Vec<&Published> = all.into_iter().collect();
    eventually("all messages settled", || all.iter().all(|p| is_settled(p))).await;
}

/// A subscription with `handler` and `drain_timeout`, once every payload was received.
pub(crate) async fn started_with(
    handler: impl Fn(Bytes, Delivery) -> futures::future::BoxFuture<'static, Outcome>
    + Send
    + Sync
    + 'static,
    drain_timeout: Duration,
    payloads: &[&str],
) -> (Subscription, Vec<Published>) {
    let registration = Registration::raw(SUB, handler).drain_timeout(drain_timeout);
    let pubsub = MemoryPubSub::new();
    let sub = start(registration, pubsub.connector()).await.unwrap();
    let all: Vec<Published> = payloads
        .iter()
        .enumerate()
        .map(|(n, data)| pubsub.publish(message(&format!("m{n}"), data)))
        .collect();
    let s = sub.clone();
    let count = payloads.len() as u64;
    eventually("all received", move || s.stats().received == count).await;
    (sub, all)
}

/// A handler that acks after `delay`.
pub(crate) fn acks_after(
    delay: Duration,
) -> impl Fn(Bytes, Delivery) -> futures::future::BoxFuture<'static, Outcome> + Send + Sync {
    move |_, d| {
        async move {
            tokio::time::sleep(delay).await;
            d.ack()
        }
        .boxed()
    }
}

/// A handler that counts its runs and acks after `delay`.
pub(crate) fn counting_acks_after(
    delay: Duration,
) -> (
    impl Fn(Bytes, Delivery) -> futures::future::BoxFuture<'static, Outcome> + Send + Sync,
    Arc<Mutex<u32>>,
) {
    let runs = Arc::new(Mutex::new(0));
    let r = runs.clone();
    let ack = acks_after(delay);
    (
        move |data, d| {
            *r.lock() += 1;
            ack(data, d)
        },
        runs,
    )
}
