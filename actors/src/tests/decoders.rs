//! A registration's own decoder: its fetch awaited before it decodes, an outage of what it
//! fetches from retried (never sent to the failure policy), everything else to the policy, the
//! same for batches and transactional handlers.

use crate::error::{Cause, DecodeError};
use crate::tests::*;
use crate::{Batch, BatchOutcome, Decoder, FailurePolicy, Preparing};
use std::collections::HashSet;
use std::sync::atomic::{AtomicU32, Ordering};

/// What the fake service answers for a revision.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Answer {
    /// The revision, after `fetch_time`.
    Found,
    /// No such revision.
    Missing,
    /// The service does not answer: try again in a second.
    Down,
    /// The fetch panics when it starts.
    Panics,
}

/// A decoder of decimal numbers whose "revision" (the `rev` attribute) must be fetched first,
/// once; the fake service answers each revision as `answers` says.
#[derive(Clone)]
pub(super) struct Numbers {
    answers: Arc<Mutex<std::collections::HashMap<String, Answer>>>,
    fetched: Arc<Mutex<HashSet<String>>>,
    fetches: Arc<AtomicU32>,
    fetch_time: Duration,
}

impl Numbers {
    pub(super) fn new(answers: &[(&str, Answer)]) -> Self {
        Self {
            answers: Arc::new(Mutex::new(
                answers.iter().map(|(r, a)| (r.to_string(), *a)).collect(),
            )),
            fetched: Arc::default(),
            fetches: Arc::default(),
            fetch_time: Duration::from_secs(3),
        }
    }

    fn answer(&self, revision: &str, answer: Answer) {
        self.answers.lock().insert(revision.into(), answer);
    }
}

fn revision_of(delivery: &Delivery) -> String {
    delivery
        .attributes()
        .get("rev")
        .cloned()
        .unwrap_or_default()
}

fn schema_error(revision: &str, problem: &str) -> DecodeError {
    DecodeError::Schema {
        schema: "numbers".into(),
        revision: revision.into(),
        field: None,
        problem: problem.into(),
    }
}

impl Decoder for Numbers {
    type Output = u64;

    fn prepare(&self, delivery: &Delivery) -> Option<Preparing> {
        let revision = revision_of(delivery);
        if self.fetched.lock().contains(&revision) {
            return None;
        }
        let answer = self.answers.lock().get(&revision).copied();
        assert!(
            answer != Some(Answer::Panics),
            "a bug in the decoder (test)"
        );
        self.fetches.fetch_add(1, Ordering::SeqCst);
        let (fetched, wait) = (self.fetched.clone(), self.fetch_time);
        Some(Box::pin(async move {
            tokio::time::sleep(wait).await;
            match answer {
                Some(Answer::Found) => {
                    fetched.lock().insert(revision);
                    Ok(())
                }
                Some(Answer::Down) => Err(DecodeError::Unavailable {
                    what: format!("revision {revision}"),
                    retry_in: Duration::from_secs(1),
                    cause: Cause::message("connection refused"),
                }),
                _ => Err(schema_error("unknown", "no such revision")),
            }
        }))
    }

    fn decode(&self, data: Bytes, delivery: &Delivery) -> Result<u64, DecodeError> {
        let revision = revision_of(delivery);
        assert!(
            self.fetched.lock().contains(&revision),
            "decode is called only once the fetch is done"
        );
        std::str::from_utf8(&data)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| schema_error(&revision, "not a number"))
    }
}

pub(super) fn numbered(id: &str, data: &str, revision: &str) -> TestMessage {
    message(id, data).attribute("rev", revision)
}

/// What a handler got, shared with the test.
type Got = Arc<Mutex<Vec<u64>>>;

/// The handler acks and keeps what it got.
fn keeping() -> (
    impl Fn(u64, Delivery) -> std::future::Ready<Outcome> + Send + Sync,
    Got,
) {
    let got = Arc::new(Mutex::new(Vec::new()));
    let g = got.clone();
    (
        move |n, d: Delivery| {
            g.lock().push(n);
            std::future::ready(d.ack())
        },
        got,
    )
}

/// A failure policy that counts its calls and drops.
fn counted_policy() -> (FailurePolicy, Arc<AtomicU32>) {
    let calls = Arc::new(AtomicU32::new(0));
    let c = calls.clone();
    let policy = FailurePolicy::custom(move |_, _| {
        c.fetch_add(1, Ordering::SeqCst);
        Outcome::drop()
    });
    (policy, calls)
}

#[actix_rt::test]
async fn messages_wait_for_the_fetch_of_their_revision_and_each_revision_is_fetched_once() {
    tokio::time::pause();
    let decoder = Numbers::new(&[("r1", Answer::Found), ("r2", Answer::Found)]);
    let (handler, got) = keeping();
    let registration = Registration::decoded(SUB, decoder.clone(), handler);
    let pubsub = MemoryPubSub::new();
    let sub = start(registration, pubsub.connector()).await.unwrap();
    let first = pubsub.publish(numbered("m1", "1", "r1"));
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        first.action(),
        None,
        "waits for its revision, its lease kept"
    );
    settled([&first]).await;
    let later: Vec<Published> = (2..6)
        .map(|n| pubsub.publish(numbered(&format!("m{n}"), &n.to_string(), "r1")))
        .chain([pubsub.publish(numbered("m9", "9", "r2"))])
        .collect();
    settled(&later).await;
    assert!(later.iter().all(|p| p.action() == Some(Action::Ack)));
    let mut got = got.lock().clone();
    got.sort_unstable();
    assert_eq!(got, [1, 2, 3, 4, 5, 9]);
    assert_eq!(
        decoder.fetches.load(Ordering::SeqCst),
        2,
        "r1 once, r2 once"
    );
    assert_eq!(sub.stats().decode_failures, 0);
    sub.stop().await;
}

#[actix_rt::test]
async fn an_outage_of_the_service_retries_the_message_and_never_reaches_the_failure_policy() {
    tokio::time::pause();
    let decoder = Numbers::new(&[("r1", Answer::Down)]);
    let (policy, policy_calls) = counted_policy();
    let (handler, got) = keeping();
    let registration = Registration::decoded(SUB, decoder.clone(), handler).failure_policy(policy);
    let pubsub = MemoryPubSub::new();
    let sub = start(registration, pubsub.connector()).await.unwrap();
    let down = pubsub.publish(numbered("m1", "1", "r1"));
    settled([&down]).await;
    assert_eq!(down.action(), Some(Action::Nack), "retried, not dropped");
    let stats = sub.stats();
    assert_eq!(policy_calls.load(Ordering::SeqCst), 0);
    assert_eq!(
        (stats.decode_failures, stats.held, stats.retried),
        (0, 1, 1)
    );
    // The service is back: the redelivery is fetched and handled.
    decoder.answer("r1", Answer::Found);
    let again = pubsub.publish(numbered("m1", "1", "r1").attempt(2));
    settled([&again]).await;
    assert_eq!(again.action(), Some(Action::Ack));
    assert_eq!(*got.lock(), [1]);
    sub.stop().await;
}

#[actix_rt::test]
async fn a_missing_revision_and_bytes_that_do_not_decode_go_to_the_failure_policy() {
    tokio::time::pause();
    let decoder = Numbers::new(&[("r1", Answer::Found), ("gone", Answer::Missing)]);
    let (policy, policy_calls) = counted_policy();
    let (handler, got) = keeping();
    let registration = Registration::decoded(SUB, decoder, handler).failure_policy(policy);
    let pubsub = MemoryPubSub::new();
    let sub = start(registration, pubsub.connector()).await.unwrap();
    let missing = pubsub.publish(numbered("m1", "1", "gone"));
    let garbled = pubsub.publish(numbered("m2", "one", "r1"));
    let fine = pubsub.publish(numbered("m3", "3", "r1"));
    settled([&missing, &garbled, &fine]).await;
    assert_eq!(missing.action(), Some(Action::Ack), "dropped by the policy");
    assert_eq!(garbled.action(), Some(Action::Ack), "dropped by the policy");
    assert_eq!(*got.lock(), [3]);
    assert_eq!(policy_calls.load(Ordering::SeqCst), 2);
    assert_eq!(sub.stats().decode_failures, 2);
    sub.stop().await;
}

#[actix_rt::test]
async fn a_decoder_whose_fetch_panics_settles_by_the_panic_policy_and_consuming_goes_on() {
    tokio::time::pause();
    let decoder = Numbers::new(&[("r1", Answer::Found), ("bad", Answer::Panics)]);
    let (handler, got) = keeping();
    let registration = Registration::decoded(SUB, decoder, handler);
    let pubsub = MemoryPubSub::new();
    let sub = start(registration, pubsub.connector()).await.unwrap();
    let bad = pubsub.publish(numbered("m1", "1", "bad"));
    let fine = pubsub.publish(numbered("m2", "2", "r1"));
    settled([&bad, &fine]).await;
    assert_eq!(bad.action(), Some(Action::Nack), "the panic policy: retry");
    assert_eq!(fine.action(), Some(Action::Ack));
    assert_eq!(*got.lock(), [2]);
    assert_eq!(sub.stats().panics, 1);
    sub.stop().await;
}

#[actix_rt::test]
async fn a_batch_waits_for_its_fetches_and_settles_the_messages_whose_fetch_failed_alone() {
    tokio::time::pause();
    let decoder = Numbers::new(&[("r1", Answer::Found), ("down", Answer::Down)]);
    let batches = Arc::new(Mutex::new(Vec::new()));
    let seen = batches.clone();
    let registration = Registration::decoded_batch(SUB, decoder.clone(), move |b: Batch<u64>| {
        seen.lock().push(b.payloads().copied().collect::<Vec<_>>());
        std::future::ready(BatchOutcome::all(Outcome::ack()))
    })
    .max_batch_messages(3);
    let pubsub = MemoryPubSub::new();
    let sub = start(registration, pubsub.connector()).await.unwrap();
    let all = [
        pubsub.publish(numbered("m1", "1", "r1")),
        pubsub.publish(numbered("m2", "2", "down")),
        pubsub.publish(numbered("m3", "3", "r1")),
    ];
    settled(&all).await;
    assert_eq!(*batches.lock(), [vec![1, 3]], "one batch, without m2");
    assert_eq!(all[1].action(), Some(Action::Nack));
    assert_eq!(
        decoder.fetches.load(Ordering::SeqCst),
        3,
        "each message asks; the decoder's cache is what shares a fetch"
    );
    assert_eq!(sub.stats().decode_failures, 0);
    sub.stop().await;
}

#[actix_rt::test]
async fn a_blocking_handler_gets_what_its_decoder_fetched_for() {
    tokio::time::pause();
    let decoder = Numbers::new(&[("r1", Answer::Found)]);
    let got = Arc::new(Mutex::new(Vec::new()));
    let g = got.clone();
    let registration = Registration::blocking_decoded(SUB, decoder, move |n: u64, d: Delivery| {
        g.lock().push(n);
        d.ack()
    });
    let pubsub = MemoryPubSub::new();
    let sub = start(registration, pubsub.connector()).await.unwrap();
    let all = [
        pubsub.publish(numbered("m1", "1", "r1")),
        pubsub.publish(numbered("m2", "2", "r1")),
    ];
    settled(&all).await;
    assert!(all.iter().all(|p| p.action() == Some(Action::Ack)));
    assert_eq!(got.lock().len(), 2);
    sub.stop().await;
}
