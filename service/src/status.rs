//! The status page: per subscription, its state, throughput over the last minute, what is
//! outstanding and held, the oldest lease, the dead-lettered count and the recent failures.
//! Plain HTML, rendered on the server, that refreshes itself: no build step, no script.

use crate::metrics::{Subscriptions, state_name};
use leasehold::Connectivity;
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::fmt::Write;
use std::time::{Duration, Instant, SystemTime};

/// How far back throughput is measured.
pub(crate) const THROUGHPUT_WINDOW: Duration = Duration::from_secs(60);

/// Samples of every subscription's settled count, one a second, to tell the throughput.
#[derive(Debug, Default)]
pub(crate) struct Throughput {
    samples: Mutex<Vec<VecDeque<(Instant, u64)>>>,
}

impl Throughput {
    /// Takes a sample of each subscription.
    pub(crate) fn sample(&self, subscriptions: &Subscriptions) {
        let now = Instant::now();
        let mut samples = self.samples.lock();
        samples.resize_with(subscriptions.len(), VecDeque::new);
        for ((_, subscription), kept) in subscriptions.iter().zip(samples.iter_mut()) {
            kept.push_back((now, subscription.stats().settled()));
            while kept
                .front()
                .is_some_and(|(at, _)| now.duration_since(*at) > THROUGHPUT_WINDOW)
            {
                kept.pop_front();
            }
        }
    }

    /// Messages settled per second over the window, for subscription `index`.
    pub(crate) fn per_second(&self, index: usize) -> f64 {
        let samples = self.samples.lock();
        let Some(kept) = samples.get(index) else {
            return 0.0;
        };
        match (kept.front(), kept.back()) {
            (Some((t0, n0)), Some((t1, n1))) if t1 > t0 => {
                (n1 - n0) as f64 / t1.duration_since(*t0).as_secs_f64()
            }
            _ => 0.0,
        }
    }
}

/// Escapes text for HTML.
fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn ago(at: SystemTime) -> String {
    let since = SystemTime::now().duration_since(at).unwrap_or_default();
    format!("{} s ago", since.as_secs())
}

/// The page.
pub(crate) fn render(
    subscriptions: &Subscriptions,
    throughput: &Throughput,
    draining: bool,
) -> String {
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
</style></head><body>
<h1>Leasehold{}</h1>
"#,
        if draining { " — draining" } else { "" }
    );
    for (index, (key, subscription)) in subscriptions.iter().enumerate() {
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
<table>
<tr><th>health</th><td>{why}</td></tr>
<tr><th>connection</th><td>{connectivity}</td></tr>
<tr><th>throughput, last minute</th><td>{rate:.1} msg/s</td></tr>
<tr><th>outstanding</th><td class="outstanding">{outstanding} messages, {bytes} bytes</td></tr>
<tr><th>handlers running, waiting</th><td>{running}, {waiting}</td></tr>
<tr><th>held (retry_after)</th><td>{holding}</td></tr>
<tr><th>oldest lease</th><td>{oldest:.1} s</td></tr>
<tr><th>received</th><td class="received">{received}</td></tr>
<tr><th>acked, retried, dropped</th><td class="settled">{acked}, {retried}, {dropped}</td></tr>
<tr><th>dead-lettered</th><td class="dead-lettered">{dead}</td></tr>
<tr><th>decode failures, panics, failed acks, lost leases</th><td>{decode}, {panics}, {failed_acks}, {lost}</td></tr>
</table>
"#,
            key = escape(key),
            why = escape(&health.why),
            connectivity = escape(&connectivity),
            rate = throughput.per_second(index),
            outstanding = in_flight.messages,
            bytes = in_flight.bytes,
            running = load.running,
            waiting = load.waiting,
            holding = subscription.holding(),
            oldest = subscription.oldest_lease().as_secs_f64(),
            received = stats.received,
            acked = stats.acked,
            retried = stats.retried,
            dropped = stats.dropped,
            dead = stats.dead_lettered,
            decode = stats.decode_failures,
            panics = stats.panics,
            failed_acks = stats.failed_acks,
            lost = stats.lost_leases,
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
        page.push_str("</section>\n");
    }
    page.push_str("</body></html>\n");
    page
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn html_is_escaped() {
        assert_eq!(
            escape("<a href=\"x\">&"),
            "&lt;a href=&quot;x&quot;&gt;&amp;"
        );
    }
}
