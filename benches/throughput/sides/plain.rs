//! The plain side: a loop over Google's official client (`google-cloud-pubsub`), the baseline
//! Leasehold's CPU per message is divided by.
//!
//! Uses the client through Leasehold's [`Connection`], and the clock and the completion signal
//! of the harness.

use crate::harness::clock::{Clock, Run};
use crate::harness::countdown::Countdown;
use google_cloud_pubsub::subscriber::handler::Handler as ClientHandler;
use leasehold::Connection;
use std::cell::RefCell;
use std::collections::HashSet;
use std::rc::Rc;

/// The plain loop over the official client: `next()` then `ack()`, until `messages` distinct
/// messages are acked (a redelivery is acked and not counted again); on exactly-once
/// subscriptions the confirmed acks are awaited concurrently and the run ends at the
/// `messages`-th confirmation (a refused ack brings its message back, counted when confirmed).
/// The last count wakes the measurement ([`Countdown`]).
pub(crate) async fn plain(
    connection: &Connection,
    subscription: &str,
    streams: usize,
    messages: u64,
) -> Run {
    let subscriber = connection.subscriber().await.unwrap();
    let done = Rc::new(Countdown::new(messages));
    // The ids acked so far, to count distinct messages; room made before the clock starts.
    let seen = Rc::new(RefCell::new(HashSet::with_capacity(messages as usize)));
    let clock = Clock::start();
    let mut tasks = Vec::new();
    for _ in 0..streams {
        let mut stream = subscriber.subscribe(subscription).build();
        let (done, seen) = (done.clone(), seen.clone());
        tasks.push(actix_rt::spawn(async move {
            let mut confirmations = futures::stream::FuturesUnordered::new();
            loop {
                tokio::select! {
                    item = stream.next() => match item {
                        Some(Ok((_m, ClientHandler::ExactlyOnce(h)))) => {
                            confirmations.push(h.confirmed_ack());
                        }
                        Some(Ok((m, h))) => {
                            h.ack();
                            if seen.borrow_mut().insert(m.message_id) {
                                done.count();
                            }
                        }
                        _ => break,
                    },
                    Some(confirmed) = futures::StreamExt::next(&mut confirmations) => {
                        if confirmed.is_ok() {
                            done.count();
                        }
                    }
                }
            }
        }));
    }
    done.reached().await;
    let run = clock.stop(messages as f64);
    for t in tasks {
        t.abort();
    }
    run
}
