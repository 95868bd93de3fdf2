//! The last minutes of every subscription, for the status page's charts: a reading every
//! [`SAMPLE_INTERVAL`], kept for [`HISTORY`], so memory is bounded (at most [`POINTS`] points
//! per subscription, whatever the traffic).
//!
//! A point is what happened between two readings: deliveries received and settled per second,
//! the handler duration's percentiles over the handlers that finished in between (from the
//! difference of two snapshots of the runtime's histogram), and the gauges at the second
//! reading (outstanding messages, the oldest lease).

use crate::metrics::Subscriptions;
use leasehold::{HistogramSnapshot, Subscription};
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
    pub(crate) received: u64,
    pub(crate) acked: u64,
    pub(crate) retried: u64,
    pub(crate) dropped: u64,
    pub(crate) dead_lettered: u64,
    pub(crate) settled: u64,
    pub(crate) handler: HistogramSnapshot,
    pub(crate) outstanding: usize,
    pub(crate) oldest_lease: Duration,
}

impl Reading {
    /// Reads `subscription` now.
    pub(crate) fn of(subscription: &Subscription) -> Self {
        let stats = subscription.stats();
        Self {
            received: stats.received,
            acked: stats.acked,
            retried: stats.retried,
            dropped: stats.dropped,
            dead_lettered: stats.dead_lettered,
            settled: stats.settled(),
            handler: subscription.histograms().handler,
            outstanding: subscription.in_flight().messages,
            oldest_lease: subscription.oldest_lease(),
        }
    }
}

/// What happened between two readings, drawn at the time of the second.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Point {
    /// When the second reading was taken.
    pub(crate) at: Instant,
    /// Seconds between the two readings.
    pub(crate) span: f64,
    /// Per second: deliveries received, acked, retried, dropped, dead-lettered, and settled in
    /// all.
    pub(crate) received: f64,
    pub(crate) acked: f64,
    pub(crate) retried: f64,
    pub(crate) dropped: f64,
    pub(crate) dead_lettered: f64,
    pub(crate) settled: f64,
    /// The handler duration's [`PERCENTILES`] in seconds, over the handlers that finished in
    /// between; `None` when none did.
    pub(crate) handler: Option<[f64; 3]>,
    /// Messages outstanding at the second reading.
    pub(crate) outstanding: usize,
    /// The oldest lease's age at the second reading, in seconds.
    pub(crate) oldest_lease: f64,
}

impl Point {
    fn between(before: &Reading, after: &Reading, span: Duration, at: Instant) -> Self {
        let seconds = span.as_secs_f64();
        let rate = |a: u64, b: u64| b.saturating_sub(a) as f64 / seconds;
        let finished = difference(&before.handler, &after.handler);
        Self {
            at,
            span: seconds,
            received: rate(before.received, after.received),
            acked: rate(before.acked, after.acked),
            retried: rate(before.retried, after.retried),
            dropped: rate(before.dropped, after.dropped),
            dead_lettered: rate(before.dead_lettered, after.dead_lettered),
            settled: rate(before.settled, after.settled),
            handler: (finished.count > 0).then(|| PERCENTILES.map(|q| quantile(q, &finished))),
            outstanding: after.outstanding,
            oldest_lease: after.oldest_lease.as_secs_f64(),
        }
    }
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

/// The `q` quantile of a histogram, estimated as Prometheus's `histogram_quantile` does: by
/// linear interpolation inside the bucket the rank falls in (from zero for the first bucket);
/// a rank above the highest bound gives that bound.
pub(crate) fn quantile(q: f64, histogram: &HistogramSnapshot) -> f64 {
    let rank = q * histogram.count as f64;
    let mut lower = (0.0, 0u64);
    for &(upper, cumulative) in &histogram.buckets {
        if cumulative as f64 >= rank && cumulative > lower.1 {
            let within = (rank - lower.1 as f64) / (cumulative - lower.1) as f64;
            return lower.0 + (upper - lower.0) * within;
        }
        lower = (upper, cumulative);
    }
    lower.0
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

    fn reading(received: u64, handled: &[f64]) -> Reading {
        Reading {
            received,
            acked: received,
            settled: received,
            handler: histogram(handled),
            ..Reading::default()
        }
    }

    #[test]
    fn a_quantile_interpolates_inside_its_bucket_as_prometheus_does() {
        // Ten observations at or below 0.1 s and above 0.05 s: the median is halfway up.
        let h = histogram(&[0.07; 10]);
        assert!((quantile(0.5, &h) - 0.075).abs() < 1e-9);
        // Everything in the first bucket interpolates from zero.
        let h = histogram(&[0.0005; 4]);
        assert!((quantile(0.5, &h) - 0.0005).abs() < 1e-9);
        // Above the highest bound: that bound.
        let h = histogram(&[7200.0]);
        assert_eq!(quantile(0.99, &h), 3600.0);
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
        assert_eq!(points[0].acked, 10.0);
        let [p50, _, p99] = points[0].handler.unwrap();
        assert!(p50 > 0.1 && p99 <= 0.25, "{p50} {p99}");
        // Nothing finished in the next interval: no percentiles, a gap in the chart.
        history.record(
            t0 + Duration::from_secs(10),
            [reading(60, &handled)].into_iter(),
        );
        assert_eq!(history.points(0)[1].handler, None);
        assert_eq!(history.points(0)[1].received, 0.0);
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
