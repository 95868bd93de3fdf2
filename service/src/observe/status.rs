//! The status page: per subscription, charts of the last minutes (throughput by outcome, the
//! handler duration's percentiles, outstanding messages, the oldest lease; the periods its
//! outage breaker was not closed shaded on each), then its state, health (as `/readyz` words
//! it), throughput over the last minute, what is outstanding and held, its breaker, the
//! counters, its outbox relay's, and the recent failures, then the dead-letter and replay
//! sections. Plain HTML with inline SVG, rendered on the server, that refreshes itself: no
//! build step, no script, no external asset. Nothing on it comes from a message but its id.
//!
//! Uses [`super::charts`], [`super::history`], [`super::dead_letters`], [`super::outbox`] and
//! [`super::html`] to write it, [`super::running`] to read the subscriptions.

use crate::observe::charts::{Chart, Line, Scale, Shaded, Value};
use crate::observe::dead_letters::{dead_letters, replay};
use crate::observe::families::state_name;
use crate::observe::history::{History, Point, open_periods};
use crate::observe::html::{ago, escape};
use crate::observe::running::{Running, Subscriptions};
use leasehold::defaults::HISTOGRAM_BUCKETS;
use leasehold::status::{BreakerReport, Connectivity, StatsSnapshot};
use std::fmt::Write;
use std::time::Instant;

/// An outcome as the page writes it (and its CSS class): `dead-lettered` for the runtime's
/// `dead_lettered`.
fn outcome_name(outcome: &str) -> String {
    outcome.replace('_', "-")
}

/// A subscription's four charts, from its points.
fn charts(key: &str, points: &[Point], max_lease: f64) -> [Chart; 4] {
    let line = |name: &str, value: &dyn Fn(&Point) -> Option<Value>| Line {
        class: name.to_string(),
        label: name.to_string(),
        values: points.iter().map(|p| (p.at, value(p))).collect(),
    };
    let at = |v: f64| Some(Value::At(v));
    // Every outcome the runtime counts, in its order: with them, the lines add up to `received`.
    let outcomes = StatsSnapshot::default().settled_by_outcome();
    let settled = outcomes.iter().enumerate().map(|(i, (outcome, _))| {
        let rate = move |p: &Point| at(p.settled_by_outcome[i].1);
        line(&outcome_name(outcome), &rate)
    });
    let percentile = |i: usize| move |p: &Point| p.handler.map(|h| h[i].into());
    let first_bound = Scale::Seconds.format(HISTOGRAM_BUCKETS[0]);
    let shaded = Shaded {
        label: "breaker not closed",
        periods: open_periods(points),
    };
    [
        Chart {
            id: format!("{key}-messages"),
            title: "Messages per second",
            note: None,
            scale: Scale::PerSecond,
            lines: std::iter::once(line("received", &|p| at(p.received)))
                .chain(settled)
                .collect(),
            limit: None,
            shaded: shaded.clone(),
        },
        Chart {
            id: format!("{key}-handler-duration"),
            title: "Handler duration",
            note: Some(format!(
                "estimated from the histogram's buckets (under {first_bound}: drawn at \
                 {first_bound})"
            )),
            scale: Scale::Seconds,
            lines: vec![
                line("p50", &percentile(0)),
                line("p95", &percentile(1)),
                line("p99", &percentile(2)),
            ],
            limit: None,
            shaded: shaded.clone(),
        },
        Chart {
            id: format!("{key}-outstanding"),
            title: "Outstanding messages",
            note: None,
            scale: Scale::Count,
            lines: vec![line("outstanding", &|p| at(p.outstanding as f64))],
            limit: None,
            shaded: shaded.clone(),
        },
        Chart {
            id: format!("{key}-oldest-lease"),
            title: "Oldest lease",
            note: None,
            scale: Scale::Seconds,
            lines: vec![Line {
                label: "oldest lease".to_string(),
                ..line("oldest", &|p| at(p.oldest_lease))
            }],
            limit: Some((max_lease, "max_lease")),
            shaded,
        },
    ]
}

/// The status table's rows for an outage breaker: its state (and for how long it has been
/// open), the messages it holds, its trips and its open time in all; then the held messages it
/// nacked.
/// A transactional handler's store, once it has done anything: what committed, what was found
/// finished, what failed, and what the database aborted.
fn store_row(stats: &StatsSnapshot) -> String {
    let StatsSnapshot {
        committed,
        replayed,
        store_failures,
        store_aborts,
        ..
    } = *stats;
    if committed + store_failures + store_aborts == 0 {
        return String::new();
    }
    format!(
        "<tr><th>store: committed, replayed, failures, aborts</th><td class=\"store\">\
         {committed}, {replayed}, {store_failures}, {store_aborts}</td></tr>\n"
    )
}

/// A subscription that dedupes on an attribute, once it has done anything: the copies settled
/// from their key's record, and the deliveries without the attribute.
fn dedupe_row(stats: &StatsSnapshot) -> String {
    let StatsSnapshot {
        deduplicated,
        dedupe_fallbacks,
        ..
    } = *stats;
    if deduplicated + dedupe_fallbacks == 0 {
        return String::new();
    }
    format!(
        "<tr><th>dedupe: found by key, without the key</th><td class=\"dedupe\">\
         {deduplicated}, {dedupe_fallbacks}</td></tr>\n"
    )
}

fn breaker_rows(breaker: &BreakerReport, stats: &StatsSnapshot) -> String {
    let state = breaker.state.as_str().replace('_', "-");
    let seconds = |d: std::time::Duration| Scale::Seconds.format(d.as_secs_f64());
    format!(
        "<tr><th>breaker</th><td class=\"breaker\"><span class=\"breaker-state {state}\">\
         {state}</span>{open_for}; held: {held}; trips: {trips}; open in all: {total}</td></tr>\n\
         <tr><th>breaker nacks (lease ending, stop)</th><td class=\"breaker-nacks\">{expired}, \
         {released}</td></tr>\n",
        open_for = breaker
            .open_for
            .map_or(String::new(), |d| format!(" for {}", seconds(d))),
        held = breaker.held,
        trips = breaker.trips,
        total = seconds(breaker.open_total),
        expired = stats.breaker_expired,
        released = stats.breaker_released,
    )
}

/// How messages reach a subscription, and for a push what its endpoint refused.
fn delivery(running: &Running) -> String {
    let Some(push) = &running.push else {
        return "pull (streaming pull)".to_string();
    };
    let stats = push.stats();
    let refused: Vec<String> = stats
        .refused
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(reason, n)| format!("{n} {reason}"))
        .collect();
    format!(
        "push on {} ({}), deadline {:?}; refused: {}; answered late: {}",
        push.path(),
        if push.authenticated() {
            "token verified"
        } else {
            "unauthenticated"
        },
        push.deadline(),
        if refused.is_empty() {
            "none".to_string()
        } else {
            refused.join(", ")
        },
        stats.late
    )
}

/// The page for `subscriptions`, with their `history`; `draining` once a stop began.
pub(crate) fn render(subscriptions: &Subscriptions, history: &History, draining: bool) -> String {
    let now = Instant::now();
    let mut page = String::new();
    let _ = write!(
        page,
        r#"<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta http-equiv="refresh" content="5">
<title>Leasehold</title>
<style>
body {{ font: 14px/1.4 system-ui, sans-serif; margin: 2em; color: #222; }}
h1 {{ font-size: 1.4em; }} h2 {{ font-size: 1.15em; margin-top: 1.6em; }}
table {{ border-collapse: collapse; margin: .4em 0; }}
td, th {{ border: 1px solid #ccc; padding: .25em .6em; text-align: left; }}
th {{ background: #f3f3f3; }}
.running {{ color: #176317; }} .draining, .starting {{ color: #8a6100; }}
.failed, .stopped {{ color: #a11; }}
.charts {{ display: grid; grid-template-columns: repeat(auto-fill, minmax(420px, 1fr));
  gap: .8em 1.6em; max-width: 1240px; margin: .6em 0 1em; }}
figure.chart {{ margin: 0; }}
figcaption {{ font-weight: 600; }} figcaption small {{ font-weight: normal; color: #666; }}
svg.chart {{ display: block; width: 100%; height: auto; }}
svg.chart text {{ font-size: 10px; fill: #666; }}
svg.chart .grid line {{ stroke: #e6e6e6; }}
svg.chart .line {{ fill: none; stroke-width: 1.6; stroke-linejoin: round; stroke-linecap: round; }}
.limit {{ stroke: #a11; stroke-dasharray: 4 3; }}
ul.legend {{ list-style: none; margin: .1em 0 0; padding: 0; font-size: 12px; display: flex;
  flex-wrap: wrap; gap: 0 1.1em; }}
.legend .key {{ display: inline-block; width: 14px; height: 3px; margin-right: .35em;
  vertical-align: middle; background: #999; }}
.legend .key.limit {{ background: repeating-linear-gradient(90deg, #a11 0 4px, transparent 4px 7px); }}
svg.chart .line.received {{ stroke: #0072b2; stroke-width: 4; stroke-opacity: .45; }}
.key.received {{ background: #0072b2; opacity: .6; }}
.line.acked {{ stroke: #009e73; }} .key.acked {{ background: #009e73; }}
.line.retried {{ stroke: #e69f00; }} .key.retried {{ background: #e69f00; }}
.line.dropped {{ stroke: #cc79a7; }} .key.dropped {{ background: #cc79a7; }}
.line.dead-lettered {{ stroke: #d55e00; }} .key.dead-lettered {{ background: #d55e00; }}
.line.released {{ stroke: #777; }} .key.released {{ background: #777; }}
.line.p50 {{ stroke: #56b4e9; }} .key.p50 {{ background: #56b4e9; }}
.line.p95 {{ stroke: #0072b2; }} .key.p95 {{ background: #0072b2; }}
.line.p99 {{ stroke: #cc79a7; }} .key.p99 {{ background: #cc79a7; }}
.line.outstanding {{ stroke: #0072b2; }} .key.outstanding {{ background: #0072b2; }}
.line.oldest {{ stroke: #e69f00; }} .key.oldest {{ background: #e69f00; }}
svg.chart .band {{ fill: #d55e00; fill-opacity: .13; }}
.key.band {{ background: #d55e00; opacity: .3; height: 10px; }}
.breaker-state.open, .breaker-state.half-open {{ color: #a11; font-weight: 600; }}
.breaker-state.closed {{ color: #176317; }}
</style></head><body>
<h1>Leasehold{}</h1>
"#,
        if draining { " — draining" } else { "" }
    );
    for (index, running) in subscriptions.iter().enumerate() {
        let (key, subscription) = (&running.key, &running.subscription);
        let state = state_name(&subscription.state());
        let stats = subscription.stats();
        let in_flight = subscription.in_flight();
        let load = subscription.load();
        let health = subscription.health();
        let connectivity = match subscription.connectivity() {
            Connectivity::Connected { since } => format!("connected since {}", ago(since)),
            Connectivity::Unreachable { since, .. } => {
                format!("unreachable since {}", ago(since))
            }
            Connectivity::Broken { reason, .. } => format!("broken: {reason}"),
            _ => "not probed yet".to_string(),
        };
        let _ = write!(
            page,
            r#"<section class="subscription" id="{key}">
<h2>{key} <span class="state {state}">{state}</span></h2>
<div class="charts">
{charts}</div>
<table>
<tr><th>delivery</th><td class="delivery">{delivery}</td></tr>
<tr><th>health</th><td class="health">{health}</td></tr>
<tr><th>connection</th><td>{connectivity}</td></tr>
<tr><th>throughput, last minute</th><td>{rate:.1} msg/s</td></tr>
<tr><th>outstanding</th><td class="outstanding">{outstanding} messages, {bytes} bytes</td></tr>
<tr><th>saturation</th><td class="saturation">{saturation:.0} % of the flow-control window</td></tr>
<tr><th>handlers running, waiting</th><td>{running}, {waiting}</td></tr>
<tr><th>read ahead: now, peak; given back</th><td class="read-ahead">{read_ahead} messages ({read_ahead_bytes} bytes), {peak_read_ahead}; {given_back}</td></tr>
<tr><th>held (retry_after)</th><td>{holding}</td></tr>
{breaker}<tr><th>oldest lease</th><td>{oldest:.1} s</td></tr>
<tr><th>received</th><td class="received">{received}</td></tr>
<tr><th>{outcomes}</th><td class="settled">{settled}</td></tr>
<tr><th>decode failures, panics, failed acks, lost leases</th><td>{decode}, {panics}, {failed_acks}, {lost}</td></tr>
{store}{dedupe}{outbox}</table>
"#,
            key = escape(key),
            charts = {
                let mut drawn = String::new();
                let max_lease = running.max_lease.as_secs_f64();
                for chart in charts(&escape(key), &history.points(index), max_lease) {
                    chart.render(&mut drawn, now);
                }
                drawn
            },
            delivery = escape(&delivery(running)),
            health = escape(&health.to_string()),
            connectivity = escape(&connectivity),
            rate = history.throughput(index, now),
            outstanding = in_flight.messages,
            saturation = running.saturation() * 100.0,
            bytes = in_flight.bytes,
            running = load.running,
            waiting = load.waiting,
            read_ahead = load.read_ahead,
            read_ahead_bytes = load.read_ahead_bytes,
            peak_read_ahead = stats.peak_read_ahead,
            given_back = stats.given_back,
            holding = subscription.holding(),
            breaker = subscription
                .breaker()
                .map_or(String::new(), |b| breaker_rows(&b, &stats)),
            oldest = subscription.oldest_lease().as_secs_f64(),
            received = stats.received,
            outcomes = stats
                .settled_by_outcome()
                .map(|(outcome, _)| outcome_name(outcome))
                .join(", "),
            settled = stats
                .settled_by_outcome()
                .map(|(_, n)| n.to_string())
                .join(", "),
            decode = stats.decode_failures,
            panics = stats.panics,
            failed_acks = stats.failed_acks,
            lost = stats.lost_leases,
            store = store_row(&stats),
            dedupe = dedupe_row(&stats),
            outbox = crate::observe::outbox::rows(running),
        );
        let failures = subscription.recent_failures();
        if failures.is_empty() {
            page.push_str("<p>No recent failures.</p>\n");
        } else {
            page.push_str(
                "<table class=\"failures\"><tr><th>when</th><th>message id</th><th>attempt</th>\
                 <th>what</th></tr>\n",
            );
            for failure in failures.iter().rev().take(20) {
                let _ = writeln!(
                    page,
                    "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                    ago(failure.at),
                    escape(&failure.message_id),
                    failure.attempt.map_or("-".to_string(), |a| a.to_string()),
                    failure.kind.as_str()
                );
            }
            page.push_str("</table>\n");
        }
        crate::observe::schemas::section(&mut page, running);
        dead_letters(&mut page, running);
        replay(&mut page, running);
        page.push_str("</section>\n");
    }
    page.push_str("</body></html>\n");
    page
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_store_row_shows_once_a_transactional_store_did_anything() {
        assert_eq!(store_row(&StatsSnapshot::default()), "");
        let mut stats = StatsSnapshot::default();
        (stats.committed, stats.replayed) = (7, 2);
        (stats.store_failures, stats.store_aborts) = (1, 3);
        let row = store_row(&stats);
        assert!(row.contains("aborts</th>"), "{row}");
        assert!(row.contains(">7, 2, 1, 3</td>"), "{row}");
    }
}
