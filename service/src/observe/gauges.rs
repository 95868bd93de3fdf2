//! The gauges of `/metrics`: what is outstanding, waiting, running, read ahead and holding, the
//! streams, the oldest lease and `max_lease`, saturation, each subscription's health and state, and the
//! outage breaker's state and held messages (subscriptions with a breaker only).
//!
//! Uses [`super::families`] to write them and [`super::running`] to read them.

use crate::observe::families::{STATES, family, state_name};
use crate::observe::running::Running;
use leasehold::status::BreakerState;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Unit;

/// Writes the gauge families of `subs`.
pub(super) fn encode(e: &mut DescriptorEncoder, subs: &[Running]) -> Result<(), std::fmt::Error> {
    use MetricType::Gauge;
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
        "messages_read_ahead",
        "Messages read while flow control had no room, waiting for it (leases kept, not \
         outstanding yet), all streams together.",
        None,
        Gauge,
        gauge(&|r| r.subscription.load().read_ahead as f64),
    )?;
    family(
        e,
        "read_ahead",
        "Payload bytes of the messages read ahead.",
        Some(&Unit::Bytes),
        Gauge,
        gauge(&|r| r.subscription.load().read_ahead_bytes as f64),
    )?;
    family(
        e,
        "messages_read_ahead_peak",
        "The most messages that waited read ahead at once, since the subscription started.",
        None,
        Gauge,
        gauge(&|r| r.subscription.stats().peak_read_ahead as f64),
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
    breakers(e, subs)
}

/// A breaker's state as `leasehold_breaker_state` gives it: 0 closed, 1 open, 2 half-open.
fn breaker_state_value(state: BreakerState) -> f64 {
    match state {
        BreakerState::Closed => 0.0,
        BreakerState::HalfOpen => 2.0,
        // Open, and any state a later runtime adds: not closed.
        _ => 1.0,
    }
}

/// The breaker's gauges, for the subscriptions that have one.
fn breakers(e: &mut DescriptorEncoder, subs: &[Running]) -> Result<(), std::fmt::Error> {
    let reports: Vec<_> = subs
        .iter()
        .filter_map(|r| r.subscription.breaker().map(|b| (r.key.as_str(), b)))
        .collect();
    let each = |f: fn(&leasehold::status::BreakerReport) -> f64| {
        reports
            .iter()
            .map(|(k, b)| (vec![("subscription", *k)], f(b)))
            .collect::<Vec<_>>()
    };
    family(
        e,
        "breaker_state",
        "Subscriptions with an outage breaker: 0 closed, 1 open (nothing new started, \
         failed messages held), 2 half-open (a held message is tried).",
        None,
        MetricType::Gauge,
        each(|b| breaker_state_value(b.state)),
    )?;
    family(
        e,
        "breaker_held",
        "Subscriptions with an outage breaker: failed messages it holds in the process now \
         (leases kept, no delivery attempt spent).",
        None,
        MetricType::Gauge,
        each(|b| b.held as f64),
    )
}
