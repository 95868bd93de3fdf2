//! The Prometheus metrics: read from each subscription's counters, gauges and histograms at
//! every scrape, so that consuming pays nothing for them but the atomics it keeps anyway.
//!
//! Every metric has the label `subscription` (the key it is configured under: a bounded set,
//! never a message id); settled messages also have `outcome`. The crate's README.md lists them
//! (a test checks the list against a real scrape).

use leasehold::{
    Subscription,
    status::{HistogramSnapshot, State},
};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};
use std::sync::Arc;
use std::time::Duration;

/// One subscription the service runs.
#[derive(Debug)]
pub(crate) struct Running {
    /// The key it is configured under.
    pub(crate) key: String,
    /// Its handle.
    pub(crate) subscription: Subscription,
    /// The `max_lease` it runs with: how old a lease may grow before it is lost.
    pub(crate) max_lease: Duration,
    /// Its push endpoint, when Pub/Sub pushes to it.
    pub(crate) push: Option<leasehold_push::PushEndpoint>,
    /// Its flow-control window, what [`saturation`](Running::saturation) is measured against.
    pub(crate) window: Window,
    /// The subscription on its dead-letter topic that `replay` takes from, as configured.
    pub(crate) dead_letter_subscription: Option<String>,
    /// A replay of its dead letters running in this process (`subscription` is then the
    /// replay's consumer, on the dead-letter subscription).
    pub(crate) replay: Option<leasehold::replay::ReplayWatch>,
    /// Where `replay KEY` processes report their progress (serving processes read it).
    pub(crate) replays_dir: Option<std::path::PathBuf>,
}

/// A subscription's flow-control window: at most this much outstanding at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Window {
    pub(crate) messages: usize,
    pub(crate) bytes: usize,
}

impl Window {
    pub(crate) fn of(options: &leasehold::Options) -> Self {
        Self {
            messages: options.max_outstanding_messages,
            bytes: options.max_outstanding_bytes,
        }
    }

    /// How full the window is with `messages` and `bytes` outstanding: the larger of the two
    /// shares, from 0 (idle) to 1 (no room: this replica takes no more until one is settled).
    pub(crate) fn saturation(&self, messages: usize, bytes: usize) -> f64 {
        let share = |used: usize, limit: usize| used as f64 / limit.max(1) as f64;
        share(messages, self.messages)
            .max(share(bytes, self.bytes))
            .clamp(0.0, 1.0)
    }
}

impl Running {
    /// How saturated this replica is for the subscription: the share of its flow-control
    /// window in use (messages or bytes, whichever is fuller), 0 to 1.
    pub(crate) fn saturation(&self) -> f64 {
        let in_flight = self.subscription.in_flight();
        self.window.saturation(in_flight.messages, in_flight.bytes)
    }
}

/// The subscriptions a service runs, in the order of their keys.
pub(crate) type Subscriptions = Arc<Vec<Running>>;

/// Reads every subscription at each scrape.
#[derive(Debug)]
pub(crate) struct SubscriptionsCollector(pub(crate) Subscriptions);

/// A registry with the service's metrics in it.
pub(crate) fn registry(subscriptions: Subscriptions) -> Registry {
    let mut registry = Registry::with_prefix("leasehold");
    registry.register_collector(Box::new(SubscriptionsCollector(subscriptions)));
    registry
}

type Labels<'a> = [(&'static str, &'a str)];

/// One counter or gauge family: its value for each subscription (and label set).
fn family<'a>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    kind: MetricType,
    values: impl IntoIterator<Item = (Vec<(&'static str, &'a str)>, f64)>,
) -> Result<(), std::fmt::Error> {
    let mut metric = encoder.encode_descriptor(name, help, unit, kind)?;
    for (labels, value) in values {
        let labels: &Labels = &labels;
        let mut one = metric.encode_family(&labels)?;
        match kind {
            MetricType::Counter => {
                one.encode_counter::<NoLabelSet, _, u64>(&(value as u64), None)?
            }
            _ => one.encode_gauge(&value)?,
        }
    }
    Ok(())
}

/// One histogram family, in seconds (`unit`) or in plain counts (none).
fn histogram(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    values: &[(&str, HistogramSnapshot)],
) -> Result<(), std::fmt::Error> {
    let mut metric = encoder.encode_descriptor(name, help, unit, MetricType::Histogram)?;
    for (key, h) in values {
        // prometheus-client takes counts per bucket, the last one +Inf.
        let mut buckets = Vec::with_capacity(h.buckets.len() + 1);
        let mut below = 0;
        for (upper, cumulative) in &h.buckets {
            buckets.push((*upper, cumulative - below));
            below = *cumulative;
        }
        buckets.push((f64::MAX, h.count - below));
        let labels: &Labels = &[("subscription", key)];
        metric
            .encode_family(&labels)?
            .encode_histogram::<NoLabelSet>(h.sum, h.count, &buckets, None)?;
    }
    Ok(())
}

/// The counters of the latest replay of each key (`replay KEY`), by the key whose dead letters
/// it replays: the replay's own, or, in a serving process, what a replay process on this
/// machine reports (its report file), while it runs and for 15 minutes after.
fn replay_families(e: &mut DescriptorEncoder, subs: &[Running]) -> Result<(), std::fmt::Error> {
    let replays: Vec<(&str, crate::replay::Report)> = subs
        .iter()
        .filter_map(|r| crate::replay::report_of(r).map(|report| (r.key.as_str(), report)))
        .collect();
    let each = |f: fn(&crate::replay::Report) -> u64| {
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
        let each = |f: &dyn Fn(&leasehold::status::StatsSnapshot) -> u64| {
            stats
                .iter()
                .map(|(k, s)| (vec![("subscription", *k)], f(s) as f64))
                .collect::<Vec<_>>()
        };
        use MetricType::{Counter, Gauge};
        let e = &mut encoder;
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
        for (k, s) in &stats {
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
            "messages_held",
            "retry_after holds started.",
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
             not_started, stopping, flow_control); Pub/Sub redelivers each.",
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

        let gauge = |f: &dyn Fn(&Running) -> f64| {
            subs.iter()
                .map(|r| (vec![("subscription", r.key.as_str())], f(r)))
                .collect::<Vec<_>>()
        };
        family(
            e,
            "outstanding_messages",
            "Messages received and not yet settled (running, waiting or held).",
            None,
            Gauge,
            gauge(&|r| r.subscription.in_flight().messages as f64),
        )?;
        family(
            e,
            "outstanding",
            "Payload bytes received and not yet settled.",
            Some(&Unit::Bytes),
            Gauge,
            gauge(&|r| r.subscription.in_flight().bytes as f64),
        )?;
        family(
            e,
            "saturation",
            "How full the flow-control window is, 0 to 1: the larger of outstanding messages \
             over max_outstanding_messages and outstanding bytes over max_outstanding_bytes. \
             Near 1, this replica takes no more messages until one is settled: scale out.",
            None,
            Gauge,
            gauge(&|r| r.saturation()),
        )?;
        family(
            e,
            "handlers_running",
            "Messages handed to a worker whose handler has not finished.",
            None,
            Gauge,
            gauge(&|r| r.subscription.load().running as f64),
        )?;
        family(
            e,
            "messages_waiting",
            "Messages waiting for a worker or for their ordering key.",
            None,
            Gauge,
            gauge(&|r| r.subscription.load().waiting as f64),
        )?;
        family(
            e,
            "messages_holding",
            "Messages whose retry_after hold is running now.",
            None,
            Gauge,
            gauge(&|r| r.subscription.holding() as f64),
        )?;
        family(
            e,
            "streams_open",
            "Streams open now (the others wait to reopen).",
            None,
            Gauge,
            gauge(&|r| r.subscription.open_streams() as f64),
        )?;
        family(
            e,
            "oldest_lease",
            "How long the oldest outstanding message has been leased.",
            Some(&Unit::Seconds),
            Gauge,
            gauge(&|r| r.subscription.oldest_lease().as_secs_f64()),
        )?;
        family(
            e,
            "max_lease",
            "The max_lease the subscription runs with: a lease older than this is lost.",
            Some(&Unit::Seconds),
            Gauge,
            gauge(&|r| r.max_lease.as_secs_f64()),
        )?;
        let health: Vec<_> = subs.iter().map(|r| r.subscription.health()).collect();
        let each_health = |f: fn(&leasehold::status::Health) -> bool| {
            subs.iter()
                .zip(&health)
                .map(|(r, h)| {
                    (
                        vec![("subscription", r.key.as_str())],
                        f64::from(u8::from(f(h))),
                    )
                })
                .collect::<Vec<_>>()
        };
        family(
            e,
            "subscription_live",
            "1 while the subscription's actors answer and it has neither failed nor hit a \
             permanent error (what /livez says for it), else 0.",
            None,
            Gauge,
            each_health(|h| h.live),
        )?;
        family(
            e,
            "subscription_ready",
            "1 while the subscription runs and its progress store answers (what /readyz says \
             for it), else 0.",
            None,
            Gauge,
            each_health(|h| h.ready),
        )?;
        let states: Vec<_> = subs
            .iter()
            .flat_map(|r| {
                let now = state_name(&r.subscription.state());
                STATES.map(|state| {
                    (
                        vec![("subscription", r.key.as_str()), ("state", state)],
                        f64::from(u8::from(state == now)),
                    )
                })
            })
            .collect();
        family(
            e,
            "subscription_state",
            "1 for the state the subscription is in: starting, running, draining, stopped, \
             failed.",
            None,
            Gauge,
            states,
        )?;
        replay_families(e, subs)?;

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
}

const STATES: [&str; 5] = ["starting", "running", "draining", "stopped", "failed"];

/// The state as a label value.
pub(crate) fn state_name(state: &State) -> &'static str {
    match state {
        State::Starting => "starting",
        State::Running => "running",
        State::Draining => "draining",
        State::Stopped => "stopped",
        State::Failed(_) => "failed",
        _ => "unknown",
    }
}

/// The metrics as Prometheus text.
pub(crate) fn render(registry: &Registry) -> String {
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, registry)
        .expect("writing to a String does not fail");
    text
}

#[cfg(test)]
mod tests {
    use super::Window;

    #[test]
    fn saturation_is_the_fuller_share_of_the_window() {
        let window = Window {
            messages: 100,
            bytes: 1_000,
        };
        assert_eq!(window.saturation(0, 0), 0.0);
        assert_eq!(window.saturation(25, 100), 0.25);
        assert_eq!(
            window.saturation(25, 900),
            0.9,
            "bytes fuller than messages"
        );
        assert_eq!(window.saturation(100, 0), 1.0);
        assert_eq!(
            window.saturation(1, 5_000),
            1.0,
            "a lone large message: capped at 1"
        );
    }
}
