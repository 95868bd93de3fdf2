//! Requests shaped exactly like Pub/Sub's documented pushes, sent by the test itself: what the
//! emulator does not send (a delivery attempt, an unwrapped push), flow control, a drain, and
//! bad input. The subscription is real (on the emulator, read at start); nothing pushes to it
//! but the test.

mod support;

use leasehold::{Delivery, Registration};
use leasehold_push::{Push, PushEndpoint};
use leasehold_test_support::issuer;
use leasehold_test_support::{Scratch, captured_logs, eventually};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use support::{PATH, Served, envelope};
use tokio::sync::Notify;

struct Setup {
    scratch: Scratch,
    sub: leasehold::Subscription,
    endpoint: PushEndpoint,
    served: Served,
}

impl Setup {
    async fn new(scratch: Scratch, push: Push, make: impl FnOnce(&str) -> Registration) -> Self {
        let inner = scratch.connection.connect().await.unwrap();
        let registration = make(&scratch.subscription);
        let (sub, endpoint) = push.start(registration, inner).await.unwrap();
        let served = Served::start(&endpoint);
        Self {
            scratch,
            sub,
            endpoint,
            served,
        }
    }

    async fn push(&self, id: &str, data: &[u8], attempt: Option<u32>) -> (u16, String) {
        let body = envelope(&self.scratch.subscription, id, data, attempt);
        let json = [("content-type", "application/json")];
        self.served.request("POST", PATH, &json, &body).await
    }

    async fn end(self) {
        self.sub.stop().await;
        self.served.stop().await;
        self.scratch.cleanup().await;
    }
}

/// A handler that counts its runs and settles by the payload.
fn counting(runs: Arc<AtomicUsize>) -> impl FnOnce(&str) -> Registration {
    move |name| {
        Registration::raw(name, move |data: bytes::Bytes, d: Delivery| {
            runs.fetch_add(1, Ordering::SeqCst);
            async move {
                match &data[..] {
                    b"drop" => d.drop(),
                    b"retry" => d.retry(),
                    _ => d.ack(),
                }
            }
        })
    }
}

#[actix_rt::test]
async fn drop_answers_success_but_on_the_last_attempt_it_nacks_for_the_dead_letter_topic() {
    let (scratch, _dead) = Scratch::with_dead_letter_topic(|s| s, 5).await;
    let runs = Arc::new(AtomicUsize::new(0));
    let setup = Setup::new(
        scratch,
        Push::allow_unauthenticated(PATH),
        counting(runs.clone()),
    )
    .await;
    assert_eq!(
        setup.push("1", b"drop", Some(4)).await.0,
        204,
        "attempt 4 of 5: acked"
    );
    assert_eq!(
        setup.push("2", b"drop", Some(5)).await.0,
        500,
        "attempt 5 of 5: nacked"
    );
    assert_eq!(
        setup.push("3", b"drop", None).await.0,
        204,
        "no attempt: acked"
    );
    assert_eq!(setup.push("4", b"ack", Some(5)).await.0, 204);
    assert_eq!(setup.push("5", b"retry", Some(1)).await.0, 500);
    let s = setup.sub.stats();
    assert_eq!(
        (s.dropped, s.dead_lettered, s.acked, s.retried),
        (2, 1, 1, 1),
        "{s:?}"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 5);
    setup.end().await;
}

#[actix_rt::test]
async fn an_unwrapped_push_reads_its_metadata_from_the_headers() {
    let scratch = Scratch::new(|s| s).await;
    let seen = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let s = seen.clone();
    let setup = Setup::new(
        scratch,
        Push::allow_unauthenticated(PATH).unwrapped(),
        |name| {
            Registration::raw(name, move |data: bytes::Bytes, d: Delivery| {
                s.lock().push((
                    d.message_id().to_string(),
                    data.to_vec(),
                    d.attributes().get("kind").cloned(),
                    d.delivery_attempt(),
                ));
                async move { d.ack() }
            })
        },
    )
    .await;
    let subscription = setup.scratch.subscription.clone();
    let headers = [
        ("x-goog-pubsub-subscription-name", subscription.as_str()),
        ("x-goog-pubsub-message-id", "2070443601311540"),
        ("x-goog-pubsub-publish-time", "2021-02-26T19:13:55.749Z"),
        ("x-goog-pubsub-delivery-attempt", "2"),
        ("kind", "order"),
    ];
    let (status, _) = setup
        .served
        .request("POST", PATH, &headers, b"raw payload")
        .await;
    assert_eq!(status, 204);
    let (status, _) = setup
        .served
        .request("POST", PATH, &headers[..1], b"no id")
        .await;
    assert_eq!(status, 400, "without write-metadata there is no message id");
    assert_eq!(
        seen.lock().clone(),
        vec![(
            "2070443601311540".to_string(),
            b"raw payload".to_vec(),
            Some("order".to_string()),
            Some(2)
        )]
    );
    setup.end().await;
}

#[actix_rt::test]
async fn at_max_outstanding_a_push_is_answered_429_at_once_and_runs_nothing() {
    let scratch = Scratch::new(|s| s).await;
    let release = Arc::new(Notify::new());
    let runs = Arc::new(AtomicUsize::new(0));
    let (r, n) = (runs.clone(), release.clone());
    let setup = Setup::new(scratch, Push::allow_unauthenticated(PATH), |name| {
        Registration::raw(name, move |_, d: Delivery| {
            r.fetch_add(1, Ordering::SeqCst);
            let n = n.clone();
            async move {
                n.notified().await;
                d.ack()
            }
        })
        .max_outstanding_messages(1)
    })
    .await;
    let setup = Arc::new(setup);
    let first = {
        let setup = setup.clone();
        actix_rt::spawn(async move { setup.push("1", b"slow", None).await })
    };
    eventually("the first push running", Duration::from_secs(10), || {
        runs.load(Ordering::SeqCst) == 1
    })
    .await;
    let (status, _) = setup.push("2", b"refused", None).await;
    assert_eq!(status, 429);
    assert_eq!(setup.endpoint.stats().refused("flow_control"), 1);
    assert_eq!(
        runs.load(Ordering::SeqCst),
        1,
        "the refused push ran nothing"
    );
    release.notify_one();
    assert_eq!(first.await.unwrap().0, 204);
    // A permit stored ahead: the next run goes straight through.
    release.notify_one();
    assert_eq!(
        setup.push("3", b"now", None).await.0,
        204,
        "room again once settled"
    );
    Arc::try_unwrap(setup).ok().unwrap().end().await;
}

#[actix_rt::test]
async fn a_stop_answers_held_pushes_at_once_refuses_new_ones_and_lets_running_ones_finish() {
    let scratch = Scratch::new(|s| s).await;
    let release = Arc::new(Notify::new());
    let runs = Arc::new(AtomicUsize::new(0));
    let (r, n) = (runs.clone(), release.clone());
    let setup = Setup::new(scratch, Push::allow_unauthenticated(PATH), |name| {
        Registration::raw(name, move |data: bytes::Bytes, d: Delivery| {
            r.fetch_add(1, Ordering::SeqCst);
            let n = n.clone();
            async move {
                if &data[..] == b"hold" {
                    return d.retry_after(Duration::from_secs(8)).unwrap();
                }
                n.notified().await;
                d.ack()
            }
        })
        .drain_timeout(Duration::from_secs(10))
    })
    .await;
    let setup = Arc::new(setup);
    let spawn_push = |id: &'static str, data: &'static [u8]| {
        let setup = setup.clone();
        actix_rt::spawn(async move {
            let answer = setup.push(id, data, None).await;
            (answer, tokio::time::Instant::now())
        })
    };
    let held = spawn_push("held", b"hold");
    let running = spawn_push("running", b"run");
    eventually("both running or held", Duration::from_secs(10), || {
        runs.load(Ordering::SeqCst) == 2 && setup.sub.stats().held == 1
    })
    .await;
    let stopping = {
        let setup = setup.clone();
        actix_rt::spawn(async move { setup.sub.stop().await })
    };
    let began = tokio::time::Instant::now();
    let ((held_status, _), held_at) = held.await.unwrap();
    assert_eq!(
        held_status, 500,
        "a held push is answered as a retry when the stop begins"
    );
    assert!(
        held_at - began < Duration::from_secs(8),
        "the hold was not cut short"
    );
    assert!(!setup.sub.health().ready, "not ready while draining");
    let (status, _) = setup.push("new", b"new", None).await;
    assert_eq!(status, 503, "no new push during the drain");
    assert_eq!(
        runs.load(Ordering::SeqCst),
        2,
        "the refused push ran nothing"
    );
    release.notify_one();
    let ((running_status, _), _) = running.await.unwrap();
    assert_eq!(
        running_status, 204,
        "the running handler finished within the drain timeout"
    );
    stopping.await.unwrap();
    assert_eq!(setup.endpoint.stats().refused("stopping"), 1);
    let setup = Arc::try_unwrap(setup).ok().unwrap();
    setup.served.stop().await;
    setup.scratch.cleanup().await;
}

#[actix_rt::test]
async fn bad_requests_get_a_clear_status_run_nothing_and_log_nothing_of_the_body() {
    let scratch = Scratch::new(|s| s).await;
    let runs = Arc::new(AtomicUsize::new(0));
    let push = Push::allow_unauthenticated(PATH).max_body(1024);
    let setup = Setup::new(scratch, push, counting(runs.clone())).await;
    let sub = setup.scratch.subscription.clone();
    let json = [("content-type", "application/json")];
    let cases: Vec<(&str, &str, &str, Vec<u8>, u16)> = vec![
        ("not json", "POST", PATH, b"secret-body-1 is no envelope".to_vec(), 400),
        ("not the envelope", "POST", PATH, br#"{"message": "secret-body-2"}"#.to_vec(), 400),
        (
            "invalid base64",
            "POST",
            PATH,
            format!(r#"{{"message": {{"messageId": "1", "data": "secret-body-3!"}}, "subscription": "{sub}"}}"#).into_bytes(),
            400,
        ),
        (
            "no message id",
            "POST",
            PATH,
            format!(r#"{{"message": {{"data": "c2VjcmV0"}}, "subscription": "{sub}"}}"#).into_bytes(),
            400,
        ),
        (
            "no subscription",
            "POST",
            PATH,
            br#"{"message": {"messageId": "1", "data": "c2VjcmV0"}}"#.to_vec(),
            400,
        ),
        (
            "another subscription",
            "POST",
            PATH,
            envelope("projects/p/subscriptions/secret-name\\nFAKE LOG LINE", "1", b"x", None),
            400,
        ),
        ("over the limit", "POST", PATH, envelope(&sub, "1", &[b'x'; 2048], None), 413),
        ("wrong method", "GET", PATH, Vec::new(), 405),
        ("wrong path", "POST", "/elsewhere", envelope(&sub, "1", b"secret-body-5", None), 404),
    ];
    for (what, method, path, body, expected) in &cases {
        let (status, answer) = setup.served.request(method, path, &json, body).await;
        assert_eq!(status, *expected, "{what}: answered {answer:?}");
        assert!(
            !answer.contains("secret"),
            "{what}: the answer quotes the body: {answer:?}"
        );
    }
    assert_eq!(
        runs.load(Ordering::SeqCst),
        0,
        "a bad request ran a handler"
    );
    assert_eq!(setup.sub.stats().received, 0);
    let stats = setup.endpoint.stats();
    assert_eq!(stats.refused("bad_request"), 6, "{stats:?}");
    assert_eq!(stats.refused("too_large"), 1, "{stats:?}");
    let logs = captured_logs();
    assert!(logs.contains("push refused"), "refusals are logged");
    assert!(!logs.contains("secret"), "a log line quotes a body");
    assert!(!logs.contains("FAKE LOG LINE"), "a body forged a log line");
    setup.end().await;
}

#[actix_rt::test]
async fn a_good_token_runs_the_handler_and_every_bad_one_is_refused_before_it_unlogged() {
    use issuer::{AUDIENCE, EMAIL, Issuer, claims, with, without};
    let issuer = Issuer::start().await;
    let scratch = Scratch::new(|s| s).await;
    let runs = Arc::new(AtomicUsize::new(0));
    let check = leasehold_push::TokenCheck::new(AUDIENCE, EMAIL).with_jwks_url(issuer.jwks_url());
    let setup = Setup::new(scratch, Push::new(PATH, check), counting(runs.clone())).await;
    let past = issuer::now() - 3600;
    let future = issuer::now() + 3600;
    let bad: Vec<(&str, String, u16)> = vec![
        (
            "wrong audience",
            issuer.token(with(claims(), "aud", "https://elsewhere.test".into())),
            403,
        ),
        (
            "wrong issuer",
            issuer.token(with(claims(), "iss", "https://evil.test".into())),
            403,
        ),
        (
            "wrong email",
            issuer.token(with(claims(), "email", "someone@else.test".into())),
            403,
        ),
        (
            "email not verified",
            issuer.token(with(claims(), "email_verified", false.into())),
            403,
        ),
        (
            "no email_verified",
            issuer.token(without(claims(), "email_verified")),
            403,
        ),
        (
            "expired",
            issuer.token(with(
                with(claims(), "iat", (past - 3600).into()),
                "exp",
                past.into(),
            )),
            403,
        ),
        (
            "not yet valid",
            issuer.token(with(claims(), "nbf", future.into())),
            403,
        ),
        ("bad signature", issuer::garbage_signature(claims()), 403),
        ("alg none", issuer::unsigned(claims()), 403),
        (
            "HS256 with the public key",
            issuer::hs256_with_public_key(claims()),
            403,
        ),
        (
            "unknown kid",
            issuer::with_kid("no-such-key", claims()),
            403,
        ),
        ("malformed", "not-a-jwt".to_string(), 401),
    ];
    let subscription = setup.scratch.subscription.clone();
    let body = envelope(&subscription, "1", b"ack", None);
    for (what, token, expected) in &bad {
        let authorization = format!("Bearer {token}");
        let headers = [("authorization", authorization.as_str())];
        let (status, answer) = setup.served.request("POST", PATH, &headers, &body).await;
        assert_eq!(status, *expected, "{what}: {answer}");
    }
    let (status, _) = setup.served.request("POST", PATH, &[], &body).await;
    assert_eq!(status, 401, "no header");
    assert_eq!(
        runs.load(Ordering::SeqCst),
        0,
        "a refused push ran the handler"
    );
    let stats = setup.endpoint.stats();
    assert_eq!(stats.refused("forbidden"), 11, "{stats:?}");
    assert_eq!(stats.refused("unauthenticated"), 2, "{stats:?}");

    let good = format!("Bearer {}", issuer.token(claims()));
    let (status, _) = setup
        .served
        .request("POST", PATH, &[("authorization", good.as_str())], &body)
        .await;
    assert_eq!(status, 204, "a good token");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let logs = captured_logs();
    for (what, token, _) in &bad {
        let signature = token.rsplit('.').next().unwrap_or(token);
        assert!(
            signature.len() < 8 || !logs.contains(signature),
            "{what}: the token reached a log"
        );
    }
    assert!(!logs.contains(&good[7..]), "a good token reached a log");
    assert!(
        !logs.contains("someone@else.test"),
        "a claim's value reached a log"
    );
    setup.end().await;
}

#[actix_rt::test]
async fn a_handler_that_outlives_the_push_deadline_is_counted_late() {
    let scratch = Scratch::new(|s| s).await;
    let push = Push::allow_unauthenticated(PATH).deadline(Duration::from_secs(1));
    let setup = Setup::new(scratch, push, |name| {
        Registration::raw(name, |_, d: Delivery| async move {
            // Longer than the push deadline: Pub/Sub has given up on the answer by then.
            tokio::time::sleep(Duration::from_secs(3)).await;
            d.ack()
        })
    })
    .await;
    assert_eq!(setup.endpoint.deadline(), Duration::from_secs(1));
    let (status, _) = setup.push("1", b"slow", None).await;
    // Pub/Sub would have given up on this request at the deadline (and redelivers); this test
    // waits, and hears the late outcome, which the runtime still sends after a lost lease.
    assert_eq!(status, 204);
    assert_eq!(setup.sub.stats().lost_leases, 1);
    assert_eq!(setup.endpoint.stats().late, 1);
    assert!(captured_logs().contains("push answered after its deadline"));
    setup.end().await;
}
