//! Starting: reading the subscription within the start timeout, the exactly-once lease floor,
//! the actor as the entry point, and what watchers hear.

use crate::error::{Cause, Code};
use crate::rules::options::EXACTLY_ONCE_MIN_LEASE_EXTENSION;
use crate::status::shared::SupervisionEvent;
use crate::tests::*;

fn unavailable() -> ReadError {
    ReadError::Other {
        code: Some(Code::Unavailable),
        cause: Cause::message("connection refused"),
    }
}

fn ack(_: Bytes, d: Delivery) -> futures::future::BoxFuture<'static, Outcome> {
    async move { d.ack() }.boxed()
}

#[actix_rt::test]
async fn transient_read_failures_are_retried_within_the_start_timeout() {
    tokio::time::pause();
    let pubsub = MemoryPubSub::new().dead_letter_after(5);
    pubsub.script_reads([
        ReadAnswer::Error(unavailable()),
        ReadAnswer::Error(unavailable()),
    ]);
    let sub = start(Registration::raw(SUB, ack), pubsub.connector())
        .await
        .unwrap();
    assert_eq!(pubsub.reads(), 3, "two failures, then the answer");
    assert_eq!(sub.max_attempts(), Some(5));
}

#[actix_rt::test]
async fn a_read_that_never_succeeds_fails_start_at_the_start_timeout() {
    tokio::time::pause();
    let pubsub = MemoryPubSub::new();
    pubsub.answer_reads(ReadAnswer::Error(unavailable()));
    let began = Instant::now();
    let registration = Registration::raw(SUB, ack).start_timeout(Duration::from_secs(5));
    let error = start(registration, pubsub.connector()).await.unwrap_err();
    assert_eq!(
        error,
        StartError::Timeout {
            subscription: SUB.into(),
            after: Duration::from_secs(5),
            last: Some(Cause::message("connection refused")),
        }
    );
    let took = began.elapsed();
    assert!(took <= Duration::from_secs(5), "{took:?}");

    // An endpoint that never answers at all: the same, with no failure to report.
    let pubsub = MemoryPubSub::new();
    pubsub.script_reads([ReadAnswer::NoAnswer]);
    let registration = Registration::raw(SUB, ack).start_timeout(Duration::from_secs(5));
    let error = start(registration, pubsub.connector()).await.unwrap_err();
    assert!(
        matches!(error, StartError::Timeout { last: None, .. }),
        "{error:?}"
    );
}

#[actix_rt::test]
async fn a_refused_read_fails_start_at_once_with_its_code() {
    tokio::time::pause();
    let refused = ReadError::Other {
        code: Some(Code::InvalidArgument),
        cause: Cause::message("bad request"),
    };
    let pubsub = MemoryPubSub::new();
    pubsub.answer_reads(ReadAnswer::Error(refused));
    let error = start(Registration::raw(SUB, ack), pubsub.connector())
        .await
        .unwrap_err();
    assert!(
        matches!(
            error,
            StartError::Read {
                code: Some(Code::InvalidArgument),
                ..
            }
        ),
        "{error:?}"
    );
    assert_eq!(pubsub.reads(), 1, "not retried");
}

#[actix_rt::test]
async fn streams_open_with_the_lease_extension_in_force() {
    tokio::time::pause();
    let pubsub = MemoryPubSub::new().exactly_once();
    // Shorter than advised on exactly-once: warned, kept.
    let registration = Registration::raw(SUB, ack).max_lease_extension(Duration::from_secs(10));
    let _sub = start(registration, pubsub.connector()).await.unwrap();
    eventually("the stream opened", || pubsub.opened_streams().len() == 1).await;
    assert_eq!(
        pubsub.opened_streams()[0].max_lease_extension,
        Duration::from_secs(10)
    );
    // The default: a minute, the advised floor.
    let pubsub = MemoryPubSub::new();
    let _sub = start(Registration::raw(SUB, ack), pubsub.connector())
        .await
        .unwrap();
    eventually("the stream opened", || pubsub.opened_streams().len() == 1).await;
    assert_eq!(
        pubsub.opened_streams()[0].max_lease_extension,
        EXACTLY_ONCE_MIN_LEASE_EXTENSION
    );
}

#[actix_rt::test]
async fn an_invalid_option_fails_start_and_names_the_option() {
    let pubsub = MemoryPubSub::new();
    let error = start(Registration::raw(SUB, ack).workers(0), pubsub.connector())
        .await
        .unwrap_err();
    let StartError::InvalidOption(invalid) = error else {
        panic!("{error:?}");
    };
    assert_eq!(invalid.option, "workers");
}

/// Collects what a subscription's supervisor tells its watchers.
struct Watcher(Arc<Mutex<Vec<SupervisionEvent>>>);

impl Actor for Watcher {
    type Context = actix::Context<Self>;
}

impl actix::Handler<SupervisionEvent> for Watcher {
    type Result = ();
    fn handle(&mut self, event: SupervisionEvent, _: &mut Self::Context) {
        self.0.lock().push(event);
    }
}

#[actix_rt::test]
async fn the_actor_is_the_entry_point_and_watchers_hear_restarts_and_the_drain() {
    tokio::time::pause();
    let pubsub = MemoryPubSub::new();
    let actor = SubscriptionActor::new(
        Registration::raw(SUB, ack).worker_threads(0),
        pubsub.connector(),
    )
    .await
    .unwrap();
    let subscription = actor.subscription();
    assert_eq!(subscription.state(), State::Starting);
    let events = Arc::new(Mutex::new(Vec::new()));
    subscription.watch(Watcher(events.clone()).start().recipient());
    let address = actor.start();
    eventually("running", || subscription.state() == State::Running).await;
    eventually("the stream opened", || pubsub.opened_streams().len() == 1).await;

    let failed = pubsub.fail_stream(
        0,
        SourceError::Stream {
            code: Some(Code::Unavailable),
            cause: Cause::message("UNAVAILABLE"),
        },
    );
    assert!(failed, "the stream was open");
    eventually("the stream reopening reported", || {
        matches!(
            events.lock().first(),
            Some(SupervisionEvent::StreamReopening { stream: 0, .. })
        )
    })
    .await;
    address.send(crate::supervisor::Stop).await.unwrap();
    eventually("the drain reported", || events.lock().len() == 3).await;
    assert_eq!(
        events.lock()[1..],
        [SupervisionEvent::Draining, SupervisionEvent::Stopped]
    );
    subscription.stop().await;
    assert_eq!(subscription.state(), State::Stopped);
}

#[tokio::test]
async fn without_an_actix_system_start_says_so() {
    let pubsub = MemoryPubSub::new();
    let error = start(Registration::raw(SUB, ack), pubsub.connector())
        .await
        .unwrap_err();
    assert_eq!(error, StartError::NoActixSystem);
}
