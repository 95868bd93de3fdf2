//! Starting: reading the subscription within the start timeout, the exactly-once lease floor,
//! the actor as the entry point, and what watchers hear.

use crate::error::{Cause, Code};
use crate::options::EXACTLY_ONCE_MIN_LEASE_EXTENSION;
use crate::shared::SupervisionEvent;
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
    let (connector, _) = FakeConnector::new(info(Some(5)), 1);
    connector
        .reads
        .lock()
        .extend([Some(Err(unavailable())), Some(Err(unavailable()))]);
    let reads = connector.read_count.clone();
    let sub = start(Registration::raw(SUB, ack), Rc::new(connector))
        .await
        .unwrap();
    assert_eq!(*reads.lock(), 3, "two failures, then the answer");
    assert_eq!(sub.max_attempts(), Some(5));
}

#[actix_rt::test]
async fn a_read_that_never_succeeds_fails_start_at_the_start_timeout() {
    tokio::time::pause();
    let (connector, _) = FakeConnector::new(Err(unavailable()), 1);
    let began = Instant::now();
    let registration = Registration::raw(SUB, ack).start_timeout(Duration::from_secs(5));
    let error = start(registration, Rc::new(connector)).await.unwrap_err();
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
    let (connector, _) = FakeConnector::new(info(None), 1);
    connector.reads.lock().push_back(None);
    let registration = Registration::raw(SUB, ack).start_timeout(Duration::from_secs(5));
    let error = start(registration, Rc::new(connector)).await.unwrap_err();
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
    let (connector, _) = FakeConnector::new(Err(refused), 1);
    let reads = connector.read_count.clone();
    let error = start(Registration::raw(SUB, ack), Rc::new(connector))
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
    assert_eq!(*reads.lock(), 1, "not retried");
}

#[actix_rt::test]
async fn streams_open_with_the_lease_extension_in_force() {
    tokio::time::pause();
    let exactly_once = Ok(SubscriptionInfo {
        exactly_once: true,
        max_delivery_attempts: None,
        ack_deadline: Duration::from_secs(10),
    });
    let (connector, _) = FakeConnector::new(exactly_once, 1);
    let opened = connector.opened.clone();
    // Shorter than advised on exactly-once: warned, kept.
    let registration = Registration::raw(SUB, ack).max_lease_extension(Duration::from_secs(10));
    let _sub = start(registration, Rc::new(connector)).await.unwrap();
    eventually("the stream opened", || opened.lock().len() == 1).await;
    assert_eq!(
        opened.lock()[0].max_lease_extension,
        Duration::from_secs(10)
    );
    // The default: a minute, the advised floor.
    let (connector, _) = FakeConnector::new(info(None), 1);
    let opened = connector.opened.clone();
    let _sub = start(Registration::raw(SUB, ack), Rc::new(connector))
        .await
        .unwrap();
    eventually("the stream opened", || opened.lock().len() == 1).await;
    assert_eq!(
        opened.lock()[0].max_lease_extension,
        EXACTLY_ONCE_MIN_LEASE_EXTENSION
    );
}

#[actix_rt::test]
async fn an_invalid_option_fails_start_and_names_the_option() {
    let (connector, _) = FakeConnector::new(info(None), 1);
    let error = start(Registration::raw(SUB, ack).workers(0), Rc::new(connector))
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
    let (connector, streams) = FakeConnector::new(info(None), 2);
    let actor = SubscriptionActor::new(
        Registration::raw(SUB, ack).worker_threads(0),
        Rc::new(connector),
    )
    .await
    .unwrap();
    let subscription = actor.subscription();
    assert_eq!(subscription.state(), State::Starting);
    let events = Arc::new(Mutex::new(Vec::new()));
    subscription.watch(Watcher(events.clone()).start().recipient());
    let address = actor.start();
    eventually("running", || subscription.state() == State::Running).await;

    streams[0]
        .send(Err(SourceError::Stream {
            code: Some(Code::Unavailable),
            cause: Cause::message("UNAVAILABLE"),
        }))
        .unwrap();
    eventually("the stream reopening reported", || {
        matches!(
            events.lock().first(),
            Some(SupervisionEvent::StreamReopening { stream: 0, .. })
        )
    })
    .await;
    address.send(crate::Stop).await.unwrap();
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
    let (connector, _) = FakeConnector::new(info(None), 1);
    let error = start(Registration::raw(SUB, ack), Rc::new(connector))
        .await
        .unwrap_err();
    assert_eq!(error, StartError::NoActixSystem);
}
