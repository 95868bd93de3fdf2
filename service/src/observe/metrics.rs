//! The Prometheus metrics: read from each subscription's counters, gauges and histograms at
//! every scrape, so that consuming pays nothing for them but the atomics it keeps anyway.
//!
//! Every metric has the label `subscription` (the key it is configured under: a bounded set,
//! never a message id); settled messages also have `outcome`. `docs/reference.md` lists them
//! (a test checks the list against a real scrape).
//!
//! Uses [`super::counters`], [`super::gauges`] and [`super::outbox`] for those families, [`super::families`] to
//! write the histograms and the replay's counters, [`super::running`] to read them.

use crate::observe::families::{family, histogram};
use crate::observe::replays::Report;
use crate::observe::running::{Running, Subscriptions};
use leasehold::status::HistogramSnapshot;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};

/// Reads every subscription at each scrape.
#[derive(Debug)]
struct SubscriptionsCollector(Subscriptions);

/// A registry with the service's metrics in it.
pub(crate) fn registry(subscriptions: Subscriptions) -> Registry {
    let mut registry = Registry::with_prefix("leasehold");
    registry.register_collector(Box::new(SubscriptionsCollector(subscriptions)));
    registry
}

/// The counters of the latest replay of each key (`replay KEY`), by the key whose dead letters
/// it replays: the replay's own, or, in a serving process, what a replay process on this
/// machine reports (its report file), while it runs and for 15 minutes after.
fn replay_families(e: &mut DescriptorEncoder, subs: &[Running]) -> Result<(), std::fmt::Error> {
    let replays: Vec<(&str, Report)> = subs
        .iter()
        .filter_map(|r| r.replay_report().map(|report| (r.key.as_str(), report)))
        .collect();
    let each = |f: fn(&Report) -> u64| {
        replays
            .iter()
            .map(|(k, p)| (vec![("subscription", *k)], f(p) as f64))
            .collect::<Vec<_>>()
    };
    use MetricType::{Counter, Gauge};
    family(
        e,
        "replay_replayed",
        "Replay: dead letters the handler acked or dropped, gone from the dead-letter \
         subscription.",
        None,
        Counter,
        each(|p| p.replayed),
    )?;
    family(
        e,
        "replay_still_failing",
        "Replay: dead letters the handler retried (retry, retry_after, an error, a panic), \
         left on the dead-letter subscription.",
        None,
        Counter,
        each(|p| p.still_failing),
    )?;
    family(
        e,
        "replay_left_out",
        "Replay: dead letters left on the dead-letter subscription unhandled (the filter left \
         them out, over the maximum, released by a cancel, listed by a dry run).",
        None,
        Counter,
        each(|p| p.left_out()),
    )?;
    family(
        e,
        "replay_running",
        "Replay: dead letters taken and not settled yet.",
        None,
        Gauge,
        each(|p| p.running),
    )
}

impl Collector for SubscriptionsCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let subs = &self.0;
        let stats: Vec<_> = subs
            .iter()
            .map(|r| (r.key.as_str(), r.subscription.stats()))
            .collect();
        let e = &mut encoder;
        crate::observe::counters::encode(e, subs, &stats)?;
        crate::observe::gauges::encode(e, subs)?;
        crate::observe::outbox::encode(e, subs)?;
        replay_families(e, subs)?;
        crate::observe::schemas::encode(e, subs)?;
        histograms(e, subs)
    }
}

/// Writes the histogram families of `subs`.
fn histograms(e: &mut DescriptorEncoder, subs: &[Running]) -> Result<(), std::fmt::Error> {
    let histograms: Vec<_> = subs
        .iter()
        .map(|r| (r.key.as_str(), r.subscription.histograms()))
        .collect();
    let pick = |f: fn(&leasehold::status::Histograms) -> &HistogramSnapshot| {
        histograms
            .iter()
            .map(|(k, h)| (*k, f(h).clone()))
            .collect::<Vec<_>>()
    };
    histogram(
        e,
        "handler_duration",
        "How long handlers ran.",
        Some(&Unit::Seconds),
        &pick(|h| &h.handler),
    )?;
    histogram(
        e,
        "publish_to_settle",
        "From publication to the message's ack or nack.",
        Some(&Unit::Seconds),
        &pick(|h| &h.publish_to_settle),
    )?;
    histogram(
        e,
        "lease_held",
        "How long each lease was held, from receipt to the ack or nack.",
        Some(&Unit::Seconds),
        &pick(|h| &h.lease_held),
    )?;
    histogram(
        e,
        "ack_confirmation",
        "From sending an ack or nack to Pub/Sub's confirmation (exactly-once).",
        Some(&Unit::Seconds),
        &pick(|h| &h.confirmation),
    )?;
    histogram(
        e,
        "batch_size",
        "Batch handlers: the messages each batch handed to the handler had.",
        None,
        &pick(|h| &h.batch_size),
    )?;
    Ok(())
}

/// The metrics as Prometheus text.
pub(crate) fn render(registry: &Registry) -> String {
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, registry)
        .expect("writing to a String does not fail");
    text
}
