//! The last minutes of every subscription, for the status page's charts: a reading every
//! [`SAMPLE_INTERVAL`], kept for [`HISTORY`], so memory is bounded (at most [`POINTS`] points
//! per subscription, whatever the traffic).
//!
//! A point is what happened between two readings: deliveries received and settled per second
//! (by outcome, every outcome the runtime counts), the handler duration's percentiles over the
//! handlers that finished in between (from the difference of two snapshots of the runtime's
//! histogram), the gauges at the second reading (outstanding messages, the oldest lease), and,
//! for a subscription with an outage breaker, its state at the second reading and how much of
//! the span it was not closed (from the difference of its open time), so that an open period
//! shorter than a reading's interval is still seen ([`open_periods`]).

use crate::observe::running::Subscriptions;
use leasehold::{
    Subscription,
    status::{BreakerState, HistogramSnapshot, StatsSnapshot},
};
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// How often each subscription is read: as often as the page refreshes itself.
pub(crate) const SAMPLE_INTERVAL: Duration = Duration::from_secs(5);

/// How far back the charts reach.
pub(crate) const HISTORY: Duration = Duration::from_secs(15 * 60);

/// The most points kept per subscription.
pub(crate) const POINTS: usize = (HISTORY.as_secs() / SAMPLE_INTERVAL.as_secs()) as usize;

/// How far back the page's throughput figure looks.
pub(crate) const THROUGHPUT_WINDOW: Duration = Duration::from_secs(60);

/// The handler duration percentiles the charts draw.
pub(crate) const PERCENTILES: [f64; 3] = [0.5, 0.95, 0.99];

/// What one subscription's counters, histogram and gauges read at one moment.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Reading {
    pub(crate) stats: StatsSnapshot,
    pub(crate) handler: HistogramSnapshot,
    pub(crate) outstanding: usize,
    pub(crate) oldest_lease: Duration,
    /// The outage breaker's state and its open time in all; `None` without one.
    pub(crate) breaker: Option<(BreakerState, Duration)>,
}

impl Reading {
    /// Reads `subscription` now.
    pub(crate) fn of(subscription: &Subscription) -> Self {
        Self {
            stats: subscription.stats(),
            handler: subscription.histograms().handler,
            outstanding: subscription.in_flight().messages,
            oldest_lease: subscription.oldest_lease(),
            breaker: subscription.breaker().map(|b| (b.state, b.open_total)),
        }
    }
}

/// A subscription's outage breaker between two readings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct BreakerSample {
    /// Its state at the second reading.
    pub(crate) state: BreakerState,
    /// The share of the span it was open or half-open, 0 to 1.
    pub(crate) open_share: f64,
}

impl BreakerSample {
    /// Whether it was not closed at some time in the span.
    pub(crate) fn was_open(&self) -> bool {
        self.open_share > 0.0 || self.state != BreakerState::Closed
    }
}

/// What happened between two readings, drawn at the time of the second.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Point {
    /// When the second reading was taken.
    pub(crate) at: Instant,
    /// Seconds between the two readings.
    pub(crate) span: f64,
    /// Deliveries received per second.
    pub(crate) received: f64,
    /// Deliveries settled per second, by outcome, as the runtime labels them
    /// ([`StatsSnapshot::settled_by_outcome`]): together they are every delivery settled.
    pub(crate) settled_by_outcome: [(&'static str, f64); 5],
    /// Deliveries settled per second, whatever their outcome.
    pub(crate) settled: f64,
    /// The handler duration's [`PERCENTILES`], over the handlers that finished in between;
    /// `None` when none did.
    pub(crate) handler: Option<[Quantile; 3]>,
    /// Messages outstanding at the second reading.
    pub(crate) outstanding: usize,
    /// The oldest lease's age at the second reading, in seconds.
    pub(crate) oldest_lease: f64,
    /// The outage breaker over the span; `None` without one.
    pub(crate) breaker: Option<BreakerSample>,
}

impl Point {
    fn between(before: &Reading, after: &Reading, span: Duration, at: Instant) -> Self {
        let seconds = span.as_secs_f64();
        let rate = |a: u64, b: u64| b.saturating_sub(a) as f64 / seconds;
        let finished = difference(&before.handler, &after.handler);
        let (earlier, later) = (
            before.stats.settled_by_outcome(),
            after.stats.settled_by_outcome(),
        );
        let settled_by_outcome =
            std::array::from_fn(|i| (later[i].0, rate(earlier[i].1, later[i].1)));
        Self {
            at,
            span: seconds,
            received: rate(before.stats.received, after.stats.received),
            settled_by_outcome,
            settled: rate(before.stats.settled(), after.stats.settled()),
            handler: (finished.count > 0).then(|| PERCENTILES.map(|q| quantile(q, &finished))),
            outstanding: after.outstanding,
            oldest_lease: after.oldest_lease.as_secs_f64(),
            breaker: after.breaker.map(|(state, open_total)| {
                let before = before.breaker.map_or(Duration::ZERO, |(_, total)| total);
                let open = open_total.saturating_sub(before).as_secs_f64();
                BreakerSample {
                    state,
                    open_share: (open / seconds).clamp(0.0, 1.0),
                }
            }),
        }
    }
}

/// The periods in which the breaker was not closed, from `points` (oldest first): each a run
/// of points whose span saw it open, from the start of the first span to the end of the last.
/// A span is shaded whole, though the breaker may have been open for part of it only.
pub(crate) fn open_periods(points: &[Point]) -> Vec<(Instant, Instant)> {
    let mut periods: Vec<(Instant, Instant)> = Vec::new();
    let mut previous_open = false;
    for point in points {
        let open = point.breaker.is_some_and(|b| b.was_open());
        if open {
            let start = point
                .at
                .checked_sub(Duration::from_secs_f64(point.span))
                .unwrap_or(point.at);
            match periods.last_mut() {
                Some((_, end)) if previous_open => *end = point.at,
                _ => periods.push((start, point.at)),
            }
        }
        previous_open = open;
    }
    periods
}

/// The observations `after` has that `before` had not: the histogram of what happened in
/// between (both cumulative, over the same bounds).
fn difference(before: &HistogramSnapshot, after: &HistogramSnapshot) -> HistogramSnapshot {
    let buckets = after
        .buckets
        .iter()
        .enumerate()
        .map(|(i, (upper, n))| {
            let earlier = before.buckets.get(i).map_or(0, |(_, m)| *m);
            (*upper, n.saturating_sub(earlier))
        })
        .collect();
    let mut difference = HistogramSnapshot::default();
    difference.buckets = buckets;
    difference.count = after.count.saturating_sub(before.count);
    difference.sum = (after.sum - before.sum).max(0.0);
    difference
}

/// A quantile estimated from a histogram's buckets, in seconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Quantile {
    /// Interpolated linearly inside the bucket the rank falls in, as Prometheus's
    /// `histogram_quantile` does.
    About(f64),
    /// In the first bucket: at most its bound, and no telling how far below. Prometheus
    /// interpolates from zero there, which puts handlers of 30 µs at 0.5 ms, 0.95 ms and 0.99 ms
    /// for p50, p95 and p99.
    AtMost(f64),
    /// Above the highest bound (Prometheus gives that bound).
    Above(f64),
}

/// The `q` quantile of a histogram: interpolated inside the bucket the rank falls in, but only
/// bounded in the first bucket and past the last (see [`Quantile`]).
pub(crate) fn quantile(q: f64, histogram: &HistogramSnapshot) -> Quantile {
    let rank = q * histogram.count as f64;
    let mut lower: Option<(f64, u64)> = None;
    for &(upper, cumulative) in &histogram.buckets {
        let (below, before) = lower.unwrap_or((0.0, 0));
        if cumulative as f64 >= rank && cumulative > before {
            if lower.is_none() {
                return Quantile::AtMost(upper);
            }
            let within = (rank - before as f64) / (cumulative - before) as f64;
            return Quantile::About(below + (upper - below) * within);
        }
        lower = Some((upper, cumulative));
    }
    Quantile::Above(lower.map_or(0.0, |(bound, _)| bound))
}

/// One subscription's last reading and its points, oldest first.
#[derive(Debug, Default)]
struct Series {
    last: Option<(Instant, Reading)>,
    points: VecDeque<Point>,
}

/// Every subscription's points, in the order of [`Subscriptions`].
#[derive(Debug, Default)]
pub(crate) struct History {
    series: Mutex<Vec<Series>>,
}

impl History {
    /// Reads every subscription now.
    pub(crate) fn sample(&self, subscriptions: &Subscriptions) {
        let readings = subscriptions.iter().map(|r| Reading::of(&r.subscription));
        self.record(Instant::now(), readings);
    }

    /// Adds the readings taken at `now`, one per subscription, and forgets points older than
    /// [`HISTORY`].
    pub(crate) fn record(&self, now: Instant, readings: impl ExactSizeIterator<Item = Reading>) {
        let mut series = self.series.lock();
        series.resize_with(readings.len(), Series::default);
        for (kept, reading) in series.iter_mut().zip(readings) {
            if let Some((then, before)) = &kept.last {
                let span = now.duration_since(*then);
                if !span.is_zero() {
                    kept.points
                        .push_back(Point::between(before, &reading, span, now));
                }
            }
            kept.last = Some((now, reading));
            while kept.points.len() > POINTS
                || kept
                    .points
                    .front()
                    .is_some_and(|p| now.duration_since(p.at) > HISTORY)
            {
                kept.points.pop_front();
            }
        }
    }

    /// Subscription `index`'s points, oldest first.
    pub(crate) fn points(&self, index: usize) -> Vec<Point> {
        self.series
            .lock()
            .get(index)
            .map(|s| s.points.iter().copied().collect())
            .unwrap_or_default()
    }

    /// Deliveries settled per second over the last [`THROUGHPUT_WINDOW`] before `now`, for
    /// subscription `index`; zero before the first point.
    pub(crate) fn throughput(&self, index: usize, now: Instant) -> f64 {
        let series = self.series.lock();
        let Some(kept) = series.get(index) else {
            return 0.0;
        };
        // The points whose whole span lies inside the window.
        let recent = kept.points.iter().filter(|p| {
            now.duration_since(p.at).as_secs_f64() + p.span <= THROUGHPUT_WINDOW.as_secs_f64()
        });
        let (settled, seconds) =
            recent.fold((0.0, 0.0), |(n, t), p| (n + p.settled * p.span, t + p.span));
        if seconds > 0.0 {
            settled / seconds
        } else {
            0.0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use leasehold::defaults::HISTOGRAM_BUCKETS;

    /// A histogram over the runtime's bounds holding `observations` (in seconds).
    fn histogram(observations: &[f64]) -> HistogramSnapshot {
        let mut h = HistogramSnapshot::default();
        h.buckets = HISTOGRAM_BUCKETS
            .iter()
            .map(|&upper| {
                (
                    upper,
                    observations.iter().filter(|&&o| o <= upper).count() as u64,
                )
            })
            .collect();
        h.count = observations.len() as u64;
        h.sum = observations.iter().sum();
        h
    }

    /// A reading of `received` deliveries, all acked, whose handlers took `handled`.
    fn reading(received: u64, handled: &[f64]) -> Reading {
        let mut stats = StatsSnapshot::default();
        stats.received = received;
        stats.acked = received;
        Reading {
            stats,
            handler: histogram(handled),
            ..Reading::default()
        }
    }

    fn about(q: Quantile) -> f64 {
        match q {
            Quantile::About(seconds) => seconds,
            other => panic!("{other:?} is no interpolated estimate"),
        }
    }

    #[test]
    fn a_quantile_interpolates_inside_its_bucket_as_prometheus_does() {
        // Ten observations at or below 0.1 s and above 0.05 s: the median is halfway up.
        let h = histogram(&[0.07; 10]);
        assert!((about(quantile(0.5, &h)) - 0.075).abs() < 1e-9);
        // Ninety handlers of 30 µs and ten of 7 ms: p95 halfway up the (5 ms, 10 ms] bucket.
        let mut observations = vec![0.000_03; 90];
        observations.extend([0.007; 10]);
        let h = histogram(&observations);
        assert!((about(quantile(0.95, &h)) - 0.0075).abs() < 1e-9);
    }

    #[test]
    fn a_quantile_in_the_first_bucket_is_only_bounded_by_it() {
        // Handlers of 30 µs: Prometheus would say 0.5 ms, 0.95 ms and 0.99 ms, 17 to 33 times
        // the truth. All that the buckets tell is "at most 1 ms".
        let h = histogram(&[0.000_03; 100]);
        for q in PERCENTILES {
            assert_eq!(quantile(q, &h), Quantile::AtMost(0.001), "{q}");
        }
        // The median among them too, though the p95 is not.
        let mut observations = vec![0.000_03; 90];
        observations.extend([0.007; 10]);
        assert_eq!(
            quantile(0.5, &histogram(&observations)),
            Quantile::AtMost(0.001)
        );
        // Above the highest bound: more than it.
        let h = histogram(&[7200.0]);
        assert_eq!(quantile(0.99, &h), Quantile::Above(3600.0));
    }

    #[test]
    fn every_outcome_has_its_rate_and_together_they_are_the_settled_rate() {
        let history = History::default();
        let t0 = Instant::now();
        history.record(t0, [Reading::default()].into_iter());
        // A drain: 50 received in 5 s, 10 of them released unrun.
        let mut stats = StatsSnapshot::default();
        stats.received = 50;
        stats.acked = 20;
        stats.retried = 10;
        stats.dropped = 5;
        stats.dead_lettered = 5;
        stats.released = 10;
        let after = Reading {
            stats,
            ..Reading::default()
        };
        history.record(t0 + Duration::from_secs(5), [after].into_iter());
        let point = history.points(0)[0];
        assert_eq!(
            point.settled_by_outcome,
            [
                ("acked", 4.0),
                ("retried", 2.0),
                ("dropped", 1.0),
                ("dead_lettered", 1.0),
                ("released", 2.0)
            ]
        );
        let total: f64 = point.settled_by_outcome.iter().map(|(_, r)| r).sum();
        assert_eq!((total, point.settled, point.received), (10.0, 10.0, 10.0));
    }

    #[test]
    fn a_point_is_the_difference_between_two_readings() {
        let history = History::default();
        let t0 = Instant::now();
        history.record(t0, [reading(10, &[0.002; 10])].into_iter());
        assert!(history.points(0).is_empty(), "one reading is no point yet");
        // 50 more in 5 s, whose handlers took 0.2 to 0.25 s: the earlier fast ones are not in
        // this point's percentiles.
        let mut handled = vec![0.002; 10];
        handled.extend([0.24; 50]);
        history.record(
            t0 + Duration::from_secs(5),
            [reading(60, &handled)].into_iter(),
        );
        let points = history.points(0);
        assert_eq!(points.len(), 1);
        assert_eq!(points[0].received, 10.0);
        assert_eq!(points[0].settled_by_outcome[0], ("acked", 10.0));
        let [p50, _, p99] = points[0].handler.unwrap().map(about);
        assert!(p50 > 0.1 && p99 <= 0.25, "{p50} {p99}");
        // Nothing finished in the next interval: no percentiles, a gap in the chart.
        history.record(
            t0 + Duration::from_secs(10),
            [reading(60, &handled)].into_iter(),
        );
        assert_eq!(history.points(0)[1].handler, None);
        assert_eq!(history.points(0)[1].received, 0.0);
    }

    /// A reading of a subscription whose breaker is in `state`, open `open_seconds` in all.
    fn breaker_reading(state: BreakerState, open_seconds: u64) -> Reading {
        Reading {
            breaker: Some((state, Duration::from_secs(open_seconds))),
            ..Reading::default()
        }
    }

    #[test]
    fn a_breaker_open_between_two_readings_is_an_open_period_of_the_chart() {
        let history = History::default();
        let t0 = Instant::now();
        let at = |i: u32| t0 + SAMPLE_INTERVAL * i;
        use BreakerState::{Closed, HalfOpen, Open};
        // Closed, then open for 2 s of the second interval (closed again at the reading: a
        // short outage between two readings), closed, then open (half-open at one reading)
        // for two intervals, then closed for good.
        let readings = [
            (Closed, 0),
            (Closed, 0),
            (Closed, 2),
            (Closed, 2),
            (Open, 4),
            (HalfOpen, 9),
            (Closed, 10),
            (Closed, 10),
        ];
        for (i, (state, open)) in readings.into_iter().enumerate() {
            history.record(at(i as u32), [breaker_reading(state, open)].into_iter());
        }
        let points = history.points(0);
        let shares: Vec<f64> = points
            .iter()
            .map(|p| p.breaker.unwrap().open_share)
            .collect();
        assert_eq!(shares, [0.0, 0.4, 0.0, 0.4, 1.0, 0.2, 0.0]);
        assert_eq!(points[4].breaker.unwrap().state, HalfOpen);
        assert_eq!(
            open_periods(&points),
            [(at(1), at(2)), (at(3), at(6))],
            "the short outage, and the long one whole"
        );
        // Without a breaker: no sample, no period.
        let plain = History::default();
        plain.record(t0, [Reading::default()].into_iter());
        plain.record(at(1), [Reading::default()].into_iter());
        assert_eq!(plain.points(0)[0].breaker, None);
        assert!(open_periods(&plain.points(0)).is_empty());
    }

    #[test]
    fn memory_is_bounded_by_the_history() {
        let history = History::default();
        let t0 = Instant::now();
        for i in 0..(POINTS as u64 * 3) {
            history.record(
                t0 + SAMPLE_INTERVAL * i as u32,
                [reading(i, &[]), reading(2 * i, &[])].into_iter(),
            );
        }
        for index in 0..2 {
            let points = history.points(index);
            assert!(points.len() <= POINTS, "{}", points.len());
            assert!(points.len() >= POINTS - 1, "{}", points.len());
            let span = points.last().unwrap().at.duration_since(points[0].at);
            assert!(span <= HISTORY, "{span:?}");
        }
    }

    #[test]
    fn throughput_is_settled_per_second_over_the_last_minute() {
        let history = History::default();
        let t0 = Instant::now();
        assert_eq!(history.throughput(0, t0), 0.0);
        // 100 a second for two minutes, then 10 a second for the last minute.
        let mut settled = 0;
        for i in 0..=36u32 {
            history.record(
                t0 + SAMPLE_INTERVAL * i,
                [reading(settled, &[])].into_iter(),
            );
            settled += if i < 24 { 500 } else { 50 };
        }
        let now = t0 + SAMPLE_INTERVAL * 36;
        assert!((history.throughput(0, now) - 10.0).abs() < 1e-9);
    }
}
