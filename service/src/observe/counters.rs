//! The counters of `/metrics`: each subscription's runtime counters (deliveries received and
//! settled by outcome, decode failures, panics, confirmed and refused acks, lost leases, store
//! and stream events), the outage breaker's (subscriptions with a breaker only: trips, held
//! messages nacked, time open) and a push subscription's refused, late and gone requests.
//!
//! Uses [`super::families`] to write them and [`super::running`] to read them.

use crate::observe::families::{family, seconds_counter};
use crate::observe::running::Running;
use leasehold::status::StatsSnapshot;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::MetricType;

/// Writes the counter families of `subs`, whose `stats` were read once for this scrape.
pub(super) fn encode(
    e: &mut DescriptorEncoder,
    subs: &[Running],
    stats: &[(&str, StatsSnapshot)],
) -> Result<(), std::fmt::Error> {
    let each = |f: &dyn Fn(&StatsSnapshot) -> u64| {
        stats
            .iter()
            .map(|(k, s)| (vec![("subscription", *k)], f(s) as f64))
            .collect::<Vec<_>>()
    };
    use MetricType::Counter;
    family(
        e,
        "batches",
        "Batch handlers: batches handed to the handler.",
        None,
        Counter,
        each(&|s| s.batches),
    )?;
    family(
        e,
        "messages_received",
        "Deliveries received from the stream (redeliveries count again).",
        None,
        Counter,
        each(&|s| s.received),
    )?;
    let mut settled = Vec::new();
    for (k, s) in stats {
        for (outcome, n) in s.settled_by_outcome() {
            settled.push((vec![("subscription", *k), ("outcome", outcome)], n as f64));
        }
    }
    family(
        e,
        "messages_settled",
        "Deliveries settled, by what became of them: acked, retried (nacked), dropped \
         (acked), dead_lettered (nacked on the last attempt), released (nacked unrun at a \
         stop).",
        None,
        Counter,
        settled,
    )?;
    family(
        e,
        "messages_given_back",
        "Deliveries given back (nacked) unrun for a consumer with room: read while flow \
         control and the read-ahead were full, or read ahead until near the end of their lease. \
         Not counted received: each comes again.",
        None,
        Counter,
        each(&|s| s.given_back),
    )?;
    family(
        e,
        "messages_deduplicated",
        "Subscriptions that dedupe on an attribute: deliveries whose key was found in the \
         progress store, settled without the handler (a copy of a message published twice, or \
         a redelivery of one finished); also counted in messages_replayed.",
        None,
        Counter,
        each(&|s| s.deduplicated),
    )?;
    family(
        e,
        "dedupe_fallbacks",
        "Subscriptions that dedupe on an attribute: deliveries without it, kept under their \
         message id.",
        None,
        Counter,
        each(&|s| s.dedupe_fallbacks),
    )?;
    family(
        e,
        "messages_held",
        "Lease holds started before a nack: a handler's retry_after, and the wait after a \
         transactional store failed to begin or commit (also counted in store_failures).",
        None,
        Counter,
        each(&|s| s.held),
    )?;
    family(
        e,
        "decode_failures",
        "Payloads that did not decode.",
        None,
        Counter,
        each(&|s| s.decode_failures),
    )?;
    family(
        e,
        "panics",
        "Panics in handlers, failure policies and progress stores.",
        None,
        Counter,
        each(&|s| s.panics),
    )?;
    family(
        e,
        "acks_confirmed",
        "Acks and nacks Pub/Sub confirmed (exactly-once subscriptions).",
        None,
        Counter,
        each(&|s| s.confirmed),
    )?;
    family(
        e,
        "acks_failed",
        "Acks and nacks Pub/Sub refused (exactly-once subscriptions).",
        None,
        Counter,
        each(&|s| s.failed_acks),
    )?;
    family(
        e,
        "leases_lost",
        "Leases whose max_lease ran out before an outcome.",
        None,
        Counter,
        each(&|s| s.lost_leases),
    )?;
    family(
        e,
        "messages_replayed",
        "Redeliveries of finished messages settled from the progress store.",
        None,
        Counter,
        each(&|s| s.replayed),
    )?;
    family(
        e,
        "transactions_committed",
        "Transactional handlers: transactions committed with their message's record.",
        None,
        Counter,
        each(&|s| s.committed),
    )?;
    family(
        e,
        "store_failures",
        "Transactional handlers: transactions that could not begin or commit (retried).",
        None,
        Counter,
        each(&|s| s.store_failures),
    )?;
    family(
        e,
        "store_aborts",
        "Transactional handlers: transactions the database aborted (the handler ran again, or \
         the message was retried).",
        None,
        Counter,
        each(&|s| s.store_aborts),
    )?;
    family(
        e,
        "stream_restarts",
        "Streams reopened after they ended.",
        None,
        Counter,
        each(&|s| s.stream_restarts),
    )?;
    family(
        e,
        "actor_restarts",
        "Worker actors started again after they died.",
        None,
        Counter,
        each(&|s| s.worker_restarts),
    )?;
    family(
        e,
        "actor_failures",
        "Leasehold actors that died (restarted workers, or a failed subscription).",
        None,
        Counter,
        each(&|s| s.actor_failures),
    )?;
    breakers(e, subs, stats)?;
    let pushes: Vec<_> = subs
        .iter()
        .filter_map(|r| r.push.as_ref().map(|p| (r.key.as_str(), p.stats())))
        .collect();
    let mut refused = Vec::new();
    for (k, p) in &pushes {
        for (reason, n) in &p.refused {
            refused.push((vec![("subscription", *k), ("reason", *reason)], *n as f64));
        }
    }
    family(
        e,
        "push_refused",
        "Push subscriptions: pushes answered before anything ran, by reason \
         (unauthenticated, forbidden, keys_unavailable, bad_request, too_large, \
         not_started, stopping, flow_control, breaker_open); Pub/Sub redelivers each.",
        None,
        Counter,
        refused,
    )?;
    let each_push = |f: &dyn Fn(&leasehold_push::PushStatsSnapshot) -> u64| {
        pushes
            .iter()
            .map(|(k, p)| (vec![("subscription", *k)], f(p) as f64))
            .collect::<Vec<_>>()
    };
    family(
        e,
        "push_late",
        "Push subscriptions: answers given after the push deadline (Pub/Sub had already \
         counted them nacks).",
        None,
        Counter,
        each_push(&|p| p.late),
    )?;
    family(
        e,
        "push_gone",
        "Push subscriptions: answers whose request the server had already dropped.",
        None,
        Counter,
        each_push(&|p| p.gone),
    )?;
    Ok(())
}

/// The breaker's counters, for the subscriptions that have one (`stats` in the order of `subs`).
fn breakers(
    e: &mut DescriptorEncoder,
    subs: &[Running],
    stats: &[(&str, StatsSnapshot)],
) -> Result<(), std::fmt::Error> {
    let with: Vec<_> = subs
        .iter()
        .zip(stats)
        .filter_map(|(r, (k, s))| r.subscription.breaker().map(|b| (*k, b, s)))
        .collect();
    let each = |f: fn(&StatsSnapshot) -> u64| {
        with.iter()
            .map(|(k, _, s)| (vec![("subscription", *k)], f(s) as f64))
            .collect::<Vec<_>>()
    };
    use MetricType::Counter;
    family(
        e,
        "breaker_trips",
        "Outage breaker: times it tripped (opened from closed).",
        None,
        Counter,
        each(|s| s.breaker_trips),
    )?;
    family(
        e,
        "breaker_expired",
        "Outage breaker: held messages nacked because their lease (max_lease) was about to \
         run out (also counted as retried).",
        None,
        Counter,
        each(|s| s.breaker_expired),
    )?;
    family(
        e,
        "breaker_released",
        "Outage breaker: held messages nacked when a stop began (also counted as retried).",
        None,
        Counter,
        each(|s| s.breaker_released),
    )?;
    seconds_counter(
        e,
        "breaker_open",
        "Outage breaker: time it was open or half-open, in all, since the process started.",
        with.iter()
            .map(|(k, b, _)| (*k, b.open_total.as_secs_f64())),
    )
}
