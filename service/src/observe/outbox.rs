//! The transactional outbox's relay, as the metrics and the status page show it: for each
//! subscription whose store's outbox this process relays (`Service::outbox`), the rows waiting
//! and the oldest one's age (as the relay last read them), the rows sent, the send failures by
//! reason, the store's failures and the rows swept. Subscriptions without a relay have none
//! of these series or rows.
//!
//! Uses [`super::families`] and [`super::running`]; reads the relay's stats only.

use crate::observe::families::family;
use crate::observe::running::Running;
use leasehold_relay::{FAILURE_KINDS, RelayStats};
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::MetricType::{Counter, Gauge};
use prometheus_client::registry::Unit;

/// The relays' families, one series per subscription with a relay (every failure reason
/// listed, at zero until it happens).
pub(super) fn encode(e: &mut DescriptorEncoder, subs: &[Running]) -> Result<(), std::fmt::Error> {
    let relays: Vec<(&str, RelayStats)> = subs
        .iter()
        .filter_map(|r| {
            r.relay
                .as_ref()
                .map(|relay| (r.key.as_str(), relay.stats()))
        })
        .collect();
    let each = |f: fn(&RelayStats) -> f64| {
        relays
            .iter()
            .map(|(k, s)| (vec![("subscription", *k)], f(s)))
            .collect::<Vec<_>>()
    };
    family(
        e,
        "outbox_pending",
        "Outbox: rows committed and not sent yet, as the relay last read them (every replica's \
         relay sees them all).",
        None,
        Gauge,
        each(|s| s.pending as f64),
    )?;
    family(
        e,
        "outbox_oldest_pending",
        "Outbox: how long the oldest row not sent yet has waited (0: none).",
        Some(&Unit::Seconds),
        Gauge,
        each(|s| s.oldest_pending.map_or(0.0, |d| d.as_secs_f64())),
    )?;
    family(
        e,
        "outbox_sent",
        "Outbox: rows this relay sent (Pub/Sub took them).",
        None,
        Counter,
        each(|s| s.sent as f64),
    )?;
    let failures: Vec<_> = relays
        .iter()
        .flat_map(|(k, s)| {
            FAILURE_KINDS.iter().map(move |kind| {
                let n = s
                    .failures
                    .iter()
                    .find(|(f, _)| f == kind)
                    .map_or(0, |f| f.1);
                (
                    vec![("subscription", *k), ("reason", kind.reason())],
                    n as f64,
                )
            })
        })
        .collect();
    family(
        e,
        "outbox_send_failures",
        "Outbox: sends that failed, by reason (unavailable, topic_missing, permission_denied, \
         invalid, ordering_key_paused); each row is kept and tried again.",
        None,
        Counter,
        failures,
    )?;
    family(
        e,
        "outbox_store_failures",
        "Outbox: the relay's calls into the database that failed (a lease, a mark, a sweep, a \
         backlog read).",
        None,
        Counter,
        each(|s| s.store_failures as f64),
    )?;
    family(
        e,
        "outbox_swept",
        "Outbox: sent rows this relay deleted past the retention.",
        None,
        Counter,
        each(|s| s.swept as f64),
    )
}

/// The status table's rows for a subscription's relay: what waits (and since when), what it
/// sent, what failed and why, what it swept.
pub(super) fn rows(running: &Running) -> String {
    let Some(relay) = &running.relay else {
        return String::new();
    };
    let s = relay.stats();
    let oldest = match (s.backlog_read, s.oldest_pending) {
        (false, _) => "not read yet".to_string(),
        (true, None) => "none".to_string(),
        (true, Some(d)) => format!("{:.1} s", d.as_secs_f64()),
    };
    let reasons: Vec<String> = s
        .failures
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(kind, n)| format!("{} {n}", kind.reason()))
        .collect();
    let failures = if reasons.is_empty() {
        s.send_failures.to_string()
    } else {
        format!("{} ({})", s.send_failures, reasons.join(", "))
    };
    let stopped = if s.stopped { " (relay stopped)" } else { "" };
    format!(
        "<tr><th>outbox: pending, oldest pending</th><td class=\"outbox\">{pending}, \
         {oldest}{stopped}</td></tr>\n\
         <tr><th>outbox: sent, send failures, swept</th><td class=\"outbox-sent\">{sent}, \
         {failures}, {swept}</td></tr>\n",
        pending = s.pending,
        sent = s.sent,
        swept = s.swept,
    )
}
