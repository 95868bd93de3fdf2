//! What a soak run did over time, printed at its end so that its duration can be explained:
//! when each wave was published and each fault happened, the rows and each replica's deliveries
//! every few seconds, when the rows arrived, and for the last messages to get their row every
//! delivery the replicas logged (when they log to files, [`crate::env::LOG`]).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// Seconds since the Unix epoch on the wall clock: the one clock the test, the database and the
/// replica processes share.
pub fn epoch_seconds(at: SystemTime) -> f64 {
    at.duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64()
}

/// The replicas' log timestamps: seconds since the Unix epoch, to the microsecond (see
/// [`epoch_seconds`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct EpochTimer;

impl tracing_subscriber::fmt::time::FormatTime for EpochTimer {
    fn format_time(&self, w: &mut tracing_subscriber::fmt::format::Writer<'_>) -> std::fmt::Result {
        write!(w, "{:.6}", epoch_seconds(SystemTime::now()))
    }
}

/// One message's row: which message, which replica wrote it, when (epoch seconds).
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub seq: i64,
    pub message_id: String,
    pub replica: String,
    pub at: f64,
}

/// What a replica logged about one delivery: when the message was received or settled.
#[derive(Debug, Clone, PartialEq)]
pub struct Logged {
    /// Epoch seconds.
    pub at: f64,
    pub message_id: String,
    /// `received`, or the result the span recorded when it closed (`acked`, `retried`, ...;
    /// `closed` when it recorded none).
    pub what: String,
}

impl Logged {
    /// Reads a line the replica's log ([`crate::env::LOG`]) holds for a message span opening or
    /// closing; `None` for any other line.
    pub fn parse(line: &str) -> Option<Self> {
        let (at, rest) = line.split_once(' ')?;
        let at: f64 = at.parse().ok()?;
        let what = if rest.ends_with(": new") {
            "received".to_string()
        } else if rest.contains(": close ") || rest.ends_with(": close") {
            field(rest, "messaging.gcp_pubsub.result=")
                .unwrap_or("closed")
                .to_string()
        } else {
            return None;
        };
        let message_id = field(rest, " message_id=")?.to_string();
        Some(Self {
            at,
            message_id,
            what,
        })
    }
}

/// The value after `name` up to the next space or brace, without quotes.
fn field<'a>(line: &'a str, name: &str) -> Option<&'a str> {
    let start = line.find(name)? + name.len();
    let value = &line[start..];
    let end = value.find([' ', '}']).unwrap_or(value.len());
    Some(value[..end].trim_matches('"'))
}

/// The median, the 99th percentile and the largest of `values`, in seconds.
fn spread(values: &mut [f64]) -> String {
    if values.is_empty() {
        return "nothing logged".to_string();
    }
    values.sort_by(f64::total_cmp);
    let at = |p: f64| values[((values.len() - 1) as f64 * p).round() as usize];
    format!(
        "median {:.2} s, 99 % within {:.2} s, longest {:.2} s, over {} messages",
        at(0.5),
        at(0.99),
        at(1.0),
        values.len()
    )
}

/// Rows and deliveries at one moment.
struct Sample {
    /// Seconds since the start.
    at: f64,
    /// Messages with a row.
    rows: i64,
    /// Deliveries each replica received so far (all its incarnations).
    received: Vec<u64>,
}

/// A run's events and samples, kept for its report.
pub struct Timeline {
    label: String,
    started: Instant,
    /// `started` in epoch seconds.
    epoch: f64,
    events: Vec<(f64, String)>,
    /// When each wave was published, in seconds since the start.
    published: Vec<f64>,
    samples: Vec<Sample>,
}

impl Timeline {
    /// A timeline starting now; `label` starts each line printed as it goes.
    pub fn new(label: &str) -> Self {
        Self {
            label: label.to_string(),
            started: Instant::now(),
            epoch: epoch_seconds(SystemTime::now()),
            events: Vec::new(),
            published: Vec::new(),
            samples: Vec::new(),
        }
    }

    /// Seconds since the start.
    pub fn now(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }

    /// Seconds since the start of an epoch time.
    fn since_start(&self, epoch: f64) -> f64 {
        epoch - self.epoch
    }

    /// Something happened (a wave published, a fault): printed now and kept for the report.
    pub fn event(&mut self, what: String) {
        let at = self.now();
        println!("{}: {what} at {at:.1} s", self.label);
        self.events.push((at, what));
    }

    /// The next wave was published: an event, and where its messages' waits start from.
    pub fn published(&mut self, what: String) {
        self.published.push(self.now());
        self.event(what);
    }

    /// Rows and each replica's deliveries now; kept at most once a second.
    pub fn sample(&mut self, rows: i64, received: impl IntoIterator<Item = u64>) {
        let at = self.now();
        if self.samples.last().is_some_and(|s| at - s.at < 1.0) {
            return;
        }
        self.samples.push(Sample {
            at,
            rows,
            received: received.into_iter().collect(),
        });
    }

    /// The report: the events, the samples every `every` seconds, when the rows arrived (by
    /// wave of `wave` messages, and the last `last` of them), and what the replicas logged about
    /// those last messages.
    pub fn report(
        &self,
        rows: &[Row],
        wave: usize,
        logged: &[(String, Logged)],
        every: f64,
        last: usize,
    ) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "  timeline (seconds since the replicas were started, at {:.3} s after the epoch):",
            self.epoch
        );
        for (at, what) in &self.events {
            let _ = writeln!(out, "  {at:>7.1}  {what}");
        }
        let _ = writeln!(
            out,
            "  {:>7}  {:>6}  {:>6}  received by each replica",
            "s", "rows", "new"
        );
        let mut shown: Option<&Sample> = None;
        for (i, s) in self.samples.iter().enumerate() {
            let is_last = i + 1 == self.samples.len();
            if !is_last && shown.is_some_and(|p| s.at - p.at < every) {
                continue;
            }
            let before = shown.map_or(0, |p| p.rows);
            let received: Vec<String> = s.received.iter().map(|r| format!("{r:>6}")).collect();
            let _ = writeln!(
                out,
                "  {:>7.1}  {:>6}  {:>6}  {}",
                s.at,
                s.rows,
                s.rows - before,
                received.join(" ")
            );
            shown = Some(s);
        }

        let mut by_time: Vec<&Row> = rows.iter().collect();
        by_time.sort_by(|a, b| a.at.total_cmp(&b.at));
        if by_time.is_empty() {
            return out;
        }
        let share = |p: f64| {
            let n = ((by_time.len() as f64 * p).ceil() as usize).clamp(1, by_time.len());
            self.since_start(by_time[n - 1].at)
        };
        let _ = writeln!(
            out,
            "  rows existed: half at {:.1} s, 90 % at {:.1} s, 99 % at {:.1} s, 99.9 % at {:.1} s, \
             all at {:.1} s",
            share(0.5),
            share(0.9),
            share(0.99),
            share(0.999),
            share(1.0)
        );
        let waves = by_time
            .iter()
            .map(|r| r.seq as usize / wave.max(1))
            .max()
            .unwrap_or(0);
        let mut last_of_wave = vec![f64::MIN; waves + 1];
        for r in &by_time {
            let w = r.seq as usize / wave.max(1);
            last_of_wave[w] = last_of_wave[w].max(self.since_start(r.at));
        }
        let waves: Vec<String> = last_of_wave
            .iter()
            .enumerate()
            .map(|(w, at)| format!("wave {w} {at:.1} s"))
            .collect();
        let _ = writeln!(out, "  each wave's last row: {}", waves.join(", "));

        let mut deliveries: HashMap<&str, Vec<(&str, &Logged)>> = HashMap::new();
        for (replica, l) in logged {
            deliveries
                .entry(l.message_id.as_str())
                .or_default()
                .push((replica.as_str(), l));
        }
        if !logged.is_empty() {
            let mut histogram: Vec<usize> = Vec::new();
            for r in rows {
                let n = deliveries.get(r.message_id.as_str()).map_or(0, |d| {
                    d.iter().filter(|(_, l)| l.what == "received").count()
                });
                if histogram.len() <= n {
                    histogram.resize(n + 1, 0);
                }
                histogram[n] += 1;
            }
            let histogram: Vec<String> = histogram
                .iter()
                .enumerate()
                .filter(|(_, n)| **n > 0)
                .map(|(d, n)| format!("{d}: {n}"))
                .collect();
            let _ = writeln!(
                out,
                "  messages by deliveries the replicas logged (killed incarnations' last ones may \
                 be missing): {}",
                histogram.join(", ")
            );
            // Where each message's time went: before any replica received it (Pub/Sub's side),
            // and from the receipt that wrote its row to the row (the replica's side).
            let mut waited = Vec::new();
            let mut handled = Vec::new();
            for r in rows {
                let Some(seen) = deliveries.get(r.message_id.as_str()) else {
                    continue;
                };
                let receipts = seen.iter().filter(|(_, l)| l.what == "received");
                if let (Some(first), Some(published)) = (
                    receipts.clone().map(|(_, l)| l.at).min_by(f64::total_cmp),
                    self.published.get(r.seq as usize / wave.max(1)),
                ) {
                    waited.push(self.since_start(first) - published);
                }
                if let Some(receipt) = receipts
                    .filter(|(replica, l)| *replica == r.replica && l.at <= r.at)
                    .map(|(_, l)| l.at)
                    .max_by(f64::total_cmp)
                {
                    handled.push(r.at - receipt);
                }
            }
            let _ = writeln!(
                out,
                "  from publication to the first receipt: {}",
                spread(&mut waited)
            );
            let _ = writeln!(
                out,
                "  from the receipt that wrote the row to the row: {}",
                spread(&mut handled)
            );
        }
        let _ = writeln!(out, "  the last {last} rows:");
        for r in by_time.iter().rev().take(last).rev() {
            let _ = writeln!(
                out,
                "  {:>7.1}  seq {:>6} (wave {}) by {}, message {}",
                self.since_start(r.at),
                r.seq,
                r.seq as usize / wave.max(1),
                r.replica,
                r.message_id
            );
            let mut seen = deliveries
                .get(r.message_id.as_str())
                .cloned()
                .unwrap_or_default();
            seen.sort_by(|a, b| a.1.at.total_cmp(&b.1.at));
            for (replica, l) in seen {
                let _ = writeln!(
                    out,
                    "           {:>7.1}  {replica} {}",
                    self.since_start(l.at),
                    l.what
                );
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replica_log_line_reads_as_a_delivery() {
        let new = "1764500000.123456 DEBUG message{subscription=projects/p/subscriptions/s \
                   message_id=42 attempt=None otel.name=s process}: \
                   leasehold_actors::supervisor: new";
        assert_eq!(
            Logged::parse(new),
            Some(Logged {
                at: 1764500000.123456,
                message_id: "42".into(),
                what: "received".into()
            })
        );
        let close = "1764500001.5 DEBUG message{subscription=s message_id=42 \
                     messaging.gcp_pubsub.result=\"acked\"}: leasehold_actors::supervisor: \
                     close time.busy=1ms time.idle=3ms";
        assert_eq!(Logged::parse(close).unwrap().what, "acked");
        assert_eq!(Logged::parse("1764500001.5 ERROR something else"), None);
        assert_eq!(Logged::parse("stats received=1"), None);
    }

    #[test]
    fn the_report_names_the_last_rows_and_their_deliveries() {
        let mut timeline = Timeline::new("test");
        timeline.published("wave 0 published".into());
        timeline.published("wave 1 published".into());
        timeline.sample(0, [0, 0]);
        let at = timeline.epoch;
        let rows: Vec<Row> = (0..4)
            .map(|seq| Row {
                seq,
                message_id: format!("m{seq}"),
                replica: "replica-0".into(),
                at: at + seq as f64,
            })
            .collect();
        let logged = vec![
            (
                "replica-1".to_string(),
                Logged {
                    at: at + 0.5,
                    message_id: "m3".into(),
                    what: "received".into(),
                },
            ),
            (
                "replica-0".to_string(),
                Logged {
                    at: at + 2.5,
                    message_id: "m3".into(),
                    what: "received".into(),
                },
            ),
        ];
        let report = timeline.report(&rows, 2, &logged, 5.0, 1);
        assert!(report.contains("wave 0 published"), "{report}");
        assert!(
            report.contains("each wave's last row: wave 0 1.0 s, wave 1 3.0 s"),
            "{report}"
        );
        assert!(report.contains("0: 3, 2: 1"), "{report}");
        // m3 was first received 0.5 s after its wave was published, and its row came 0.5 s
        // after replica-0 received it.
        assert!(
            report.contains("to the first receipt: median 0.50 s, 99 % within 0.50 s, longest 0.50 s, over 1 messages"),
            "{report}"
        );
        assert!(
            report.contains("that wrote the row to the row: median 0.50 s"),
            "{report}"
        );
        assert!(
            report.contains("seq      3 (wave 1) by replica-0, message m3"),
            "{report}"
        );
        assert!(report.contains("2.5  replica-0 received"), "{report}");
        assert!(!report.contains("seq      2 "), "{report}");
    }
}
