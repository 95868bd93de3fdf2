//! Line charts drawn on the server as inline SVG: no script, no external asset, readable in
//! any browser (and in a text one through their legends, which give each line's latest value).
//!
//! A chart spans the last [`HISTORY`] up to the moment the page is drawn; its vertical scale
//! starts at zero and ends at a round value above the highest point. A `None` value leaves a gap
//! in its line (the handler percentiles have none while no handler finishes). A value known
//! only to be under (or over) a bound is drawn at the bound and written `< bound`. Periods can
//! be shaded behind the lines (the outage breaker not closed), with a legend entry saying what
//! they are.

use crate::observe::history::{HISTORY, Quantile};
use std::fmt::Write;
use std::time::Instant;

/// The drawing's size, in SVG units (it scales to the width of its box).
const WIDTH: f64 = 440.0;
const HEIGHT: f64 = 150.0;
/// The plot inside it: room on the left for the scale, below for the time axis.
const LEFT: f64 = 50.0;
const RIGHT: f64 = 8.0;
const TOP: f64 = 8.0;
const BOTTOM: f64 = 20.0;

/// How a chart's values read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scale {
    /// Events per second.
    PerSecond,
    /// Durations in seconds, shown in ms or s.
    Seconds,
    /// A number of things.
    Count,
}

impl Scale {
    /// The top of the scale when every value is zero.
    fn least_top(self) -> f64 {
        match self {
            Scale::PerSecond => 1.0,
            Scale::Seconds => 1.0,
            Scale::Count => 4.0,
        }
    }

    /// A value as the scale and the legend write it.
    pub(crate) fn format(self, value: f64) -> String {
        match self {
            Scale::PerSecond => format!("{}/s", number(value)),
            Scale::Seconds if value > 0.0 && value < 1.0 => format!("{} ms", number(value * 1e3)),
            Scale::Seconds if value >= 7200.0 => format!("{} h", number(value / 3600.0)),
            Scale::Seconds if value >= 120.0 => format!("{} min", number(value / 60.0)),
            Scale::Seconds => format!("{} s", number(value)),
            Scale::Count => number(value),
        }
    }

    /// A point's value as the legend writes it, in HTML.
    fn write(self, value: Value) -> String {
        match value {
            Value::At(v) => self.format(v),
            Value::AtMost(bound) => format!("&lt; {}", self.format(bound)),
            Value::Above(bound) => format!("&gt; {}", self.format(bound)),
        }
    }
}

/// A point's value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Value {
    /// This value (an estimate within a bucket counts as one).
    At(f64),
    /// At most this bound, how far below unknown: drawn at the bound, written `< bound`.
    AtMost(f64),
    /// More than this bound: drawn at the bound, written `> bound`.
    Above(f64),
}

impl Value {
    /// Where it is drawn.
    fn height(self) -> f64 {
        match self {
            Value::At(v) | Value::AtMost(v) | Value::Above(v) => v,
        }
    }
}

impl From<Quantile> for Value {
    fn from(quantile: Quantile) -> Self {
        match quantile {
            Quantile::About(seconds) => Value::At(seconds),
            Quantile::AtMost(bound) => Value::AtMost(bound),
            Quantile::Above(bound) => Value::Above(bound),
        }
    }
}

/// A number with as many decimals as its size needs: `1250`, `12.5`, `0.25`.
fn number(value: f64) -> String {
    let text = if value >= 100.0 || value == value.trunc() {
        format!("{value:.0}")
    } else if value >= 10.0 {
        format!("{value:.1}")
    } else {
        format!("{value:.2}")
    };
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        text
    }
}

/// One line of a chart.
#[derive(Debug, Clone)]
pub(crate) struct Line {
    /// Its CSS class, which gives its colour (the page's style sheet has one per class).
    pub(crate) class: String,
    /// What it shows, for the legend.
    pub(crate) label: String,
    /// Its values, oldest first: when, and the value (`None` for a gap).
    pub(crate) values: Vec<(Instant, Option<Value>)>,
}

/// A chart: a title, a scale, its lines, and a limit drawn as a dashed line once the values
/// come within half of it.
#[derive(Debug, Clone)]
pub(crate) struct Chart {
    /// Its element id, unique on the page.
    pub(crate) id: String,
    /// Its caption.
    pub(crate) title: &'static str,
    /// A note after the caption, on how to read it.
    pub(crate) note: Option<String>,
    pub(crate) scale: Scale,
    pub(crate) lines: Vec<Line>,
    /// A value not to reach, and what it is (`max_lease`).
    pub(crate) limit: Option<(f64, &'static str)>,
    /// Periods shaded behind the lines, from and to, and what they are.
    pub(crate) shaded: Shaded,
}

/// Periods a chart shades behind its lines, and what they are for its legend.
#[derive(Debug, Clone, Default)]
pub(crate) struct Shaded {
    /// What the shading means (`breaker not closed`).
    pub(crate) label: &'static str,
    /// Each period, from and to.
    pub(crate) periods: Vec<(Instant, Instant)>,
}

/// A round step for about four divisions of `0..=max`, and the top it gives.
fn ticks(max: f64, scale: Scale) -> (f64, f64) {
    let max = if max > 0.0 { max } else { scale.least_top() };
    let raw = max / 4.0;
    let magnitude = 10f64.powf(raw.log10().floor());
    let mut step = [1.0, 2.0, 2.5, 5.0, 10.0]
        .into_iter()
        .map(|m| m * magnitude)
        .find(|s| *s >= raw * (1.0 - 1e-9))
        .unwrap_or(10.0 * magnitude);
    if scale == Scale::Count {
        step = step.max(1.0).round();
    }
    let top = (max / step - 1e-9).ceil().max(1.0) * step;
    (step, top)
}

impl Chart {
    /// Writes the chart, as it stands at `now`, into `page`: a `<figure>` holding the `<svg>`
    /// and its legend.
    pub(crate) fn render(&self, page: &mut String, now: Instant) {
        let highest = self
            .lines
            .iter()
            .flat_map(|l| l.values.iter().filter_map(|(_, v)| v.map(Value::height)))
            .fold(0.0, f64::max);
        let limit = self.limit.filter(|(limit, _)| highest >= limit / 2.0);
        let (step, top) = ticks(limit.map_or(highest, |(l, _)| highest.max(l)), self.scale);
        let plot_width = WIDTH - LEFT - RIGHT;
        let plot_height = HEIGHT - TOP - BOTTOM;
        let x = |at: Instant| {
            let age = now.saturating_duration_since(at).as_secs_f64();
            LEFT + plot_width * (1.0 - (age / HISTORY.as_secs_f64()).min(1.0))
        };
        let y = |value: f64| TOP + plot_height * (1.0 - (value / top).clamp(0.0, 1.0));

        let _ = write!(
            page,
            r#"<figure class="chart" id="{id}"><figcaption>{title}{note}</figcaption>
<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-labelledby="{id}-title">
<title id="{id}-title">{title}, the last {minutes} minutes</title>
"#,
            id = self.id,
            title = self.title,
            note = self
                .note
                .as_ref()
                .map_or(String::new(), |n| format!(" <small>{n}</small>")),
            minutes = HISTORY.as_secs() / 60,
        );
        // The scale: a grid line and a label at every step.
        page.push_str("<g class=\"grid\">");
        let mut tick = 0.0;
        while tick <= top * (1.0 + 1e-9) {
            let _ = write!(
                page,
                r#"<line x1="{LEFT}" x2="{right}" y1="{y:.1}" y2="{y:.1}"/><text x="{label_x}" y="{text_y:.1}" text-anchor="end">{label}</text>"#,
                right = WIDTH - RIGHT,
                y = y(tick),
                label_x = LEFT - 4.0,
                text_y = y(tick) + 3.5,
                label = self.scale.format(tick),
            );
            tick += step;
        }
        // The time axis: a mark every five minutes.
        let minutes = HISTORY.as_secs() / 60;
        for ago in (0..=minutes).step_by(5) {
            let at_x = LEFT + plot_width * (1.0 - ago as f64 / minutes as f64);
            let label = if ago == 0 {
                "now".to_string()
            } else {
                format!("−{ago} min")
            };
            let anchor = match ago {
                0 => "end",
                a if a == minutes => "start",
                _ => "middle",
            };
            let _ = write!(
                page,
                r#"<text x="{at_x:.1}" y="{text_y}" text-anchor="{anchor}">{label}</text>"#,
                text_y = HEIGHT - 6.0,
            );
        }
        page.push_str("</g>\n");
        let mut shaded = false;
        for (from, to) in &self.shaded.periods {
            let (left, right) = (x(*from), x(*to));
            if right <= LEFT {
                continue;
            }
            shaded = true;
            let _ = writeln!(
                page,
                r#"<rect class="band" x="{left:.1}" y="{TOP}" width="{width:.1}" height="{plot_height}"><title>{label}</title></rect>"#,
                width = (right - left).max(1.0),
                label = self.shaded.label,
            );
        }
        if let Some((limit, name)) = limit {
            let _ = writeln!(
                page,
                r#"<line class="limit" x1="{LEFT}" x2="{right}" y1="{y:.1}" y2="{y:.1}"><title>{name}</title></line>"#,
                right = WIDTH - RIGHT,
                y = y(limit),
            );
        }
        let mut drawn = false;
        for line in &self.lines {
            let d = path(&line.values, &x, &y);
            drawn |= !d.is_empty();
            let _ = writeln!(
                page,
                r#"<path class="line {class}" d="{d}"><title>{label}</title></path>"#,
                class = line.class,
                label = line.label,
            );
        }
        if !drawn {
            let _ = writeln!(
                page,
                r#"<text class="empty" x="{cx}" y="{cy}" text-anchor="middle">no samples yet: one every {every} s</text>"#,
                cx = LEFT + plot_width / 2.0,
                cy = TOP + plot_height / 2.0,
                every = crate::observe::history::SAMPLE_INTERVAL.as_secs(),
            );
        }
        page.push_str("</svg>\n<ul class=\"legend\">");
        for line in &self.lines {
            let latest = line
                .values
                .iter()
                .rev()
                .find_map(|(_, v)| *v)
                .map_or("–".to_string(), |v| self.scale.write(v));
            let _ = write!(
                page,
                r#"<li><span class="key {class}"></span>{label} <b>{latest}</b></li>"#,
                class = line.class,
                label = line.label,
            );
        }
        if let Some((limit, name)) = self.limit {
            let _ = write!(
                page,
                r#"<li><span class="key limit"></span>{name} <b>{}</b></li>"#,
                self.scale.format(limit)
            );
        }
        if shaded {
            let _ = write!(
                page,
                r#"<li><span class="key band"></span>{}</li>"#,
                self.shaded.label
            );
        }
        page.push_str("</ul></figure>\n");
    }
}

/// The SVG path of `values`: a subpath for each run without a gap; a run of one point is a dot
/// (a zero-length segment, drawn by the round line cap).
fn path(
    values: &[(Instant, Option<Value>)],
    x: &impl Fn(Instant) -> f64,
    y: &impl Fn(f64) -> f64,
) -> String {
    let mut d = String::new();
    let mut run = 0;
    for (at, value) in values {
        match value {
            Some(v) => {
                let command = if run == 0 { 'M' } else { 'L' };
                let _ = write!(d, "{command}{:.1} {:.1}", x(*at), y(v.height()));
                run += 1;
            }
            None => {
                if run == 1 {
                    d.push_str("h0");
                }
                run = 0;
            }
        }
    }
    if run == 1 {
        d.push_str("h0");
    }
    d
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_scale_ends_at_a_round_value_above_the_highest_point() {
        assert_eq!(ticks(0.0, Scale::PerSecond), (0.25, 1.0));
        assert_eq!(ticks(7.3, Scale::PerSecond), (2.0, 8.0));
        assert_eq!(ticks(100.0, Scale::PerSecond), (25.0, 100.0));
        assert_eq!(ticks(3.0, Scale::Count), (1.0, 3.0));
        assert_eq!(ticks(0.0, Scale::Count), (1.0, 4.0));
        let (step, top) = ticks(0.0042, Scale::Seconds);
        assert!((step - 0.002).abs() < 1e-12 && (top - 0.006).abs() < 1e-12);
    }

    #[test]
    fn values_read_in_their_units() {
        assert_eq!(Scale::PerSecond.format(12.5), "12.5/s");
        assert_eq!(Scale::PerSecond.format(0.25), "0.25/s");
        assert_eq!(Scale::Seconds.format(0.0025), "2.5 ms");
        assert_eq!(Scale::Seconds.format(0.0), "0 s");
        assert_eq!(Scale::Seconds.format(2.5), "2.5 s");
        assert_eq!(Scale::Seconds.format(90.0), "90 s");
        assert_eq!(Scale::Seconds.format(600.0), "10 min");
        assert_eq!(Scale::Seconds.format(3600.0), "60 min");
        assert_eq!(Scale::Seconds.format(3.0 * 3600.0), "3 h");
        assert_eq!(Scale::Count.format(1250.0), "1250");
    }

    #[test]
    fn a_gap_splits_the_line_and_a_lone_point_is_a_dot() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let values = [
            (at(0), Some(Value::At(1.0))),
            (at(5), Some(Value::At(2.0))),
            (at(10), None),
            (at(15), Some(Value::AtMost(3.0))),
            (at(20), None),
        ];
        let d = path(&values, &|t| t.duration_since(t0).as_secs_f64(), &|v| v);
        assert_eq!(d, "M0.0 1.0L5.0 2.0M15.0 3.0h0");
        assert_eq!(path(&[(at(0), None)], &|_| 0.0, &|v| v), "");
    }

    #[test]
    fn a_chart_draws_its_lines_its_legend_and_a_near_limit() {
        let now = Instant::now();
        let chart = Chart {
            id: "orders-oldest-lease".into(),
            title: "Oldest lease",
            note: None,
            scale: Scale::Seconds,
            lines: vec![Line {
                class: "oldest".into(),
                label: "oldest lease".into(),
                values: vec![
                    (now - Duration::from_secs(10), Some(Value::At(4.0))),
                    (now - Duration::from_secs(5), Some(Value::At(6.0))),
                ],
            }],
            limit: Some((10.0, "max_lease")),
            shaded: Shaded::default(),
        };
        let mut page = String::new();
        chart.render(&mut page, now);
        assert!(page.contains(r#"<svg class="chart""#), "{page}");
        assert!(page.contains(r#"<path class="line oldest" d="M"#), "{page}");
        assert!(page.contains(r#"<line class="limit""#), "{page}");
        assert!(page.contains("oldest lease <b>6 s</b>"), "{page}");
        assert!(page.contains("max_lease <b>10 s</b>"), "{page}");

        // Far from the limit: no dashed line, the scale fits the values.
        let mut far = chart.clone();
        far.limit = Some((3600.0, "max_lease"));
        let mut page = String::new();
        far.render(&mut page, now);
        assert!(!page.contains(r#"<line class="limit""#), "{page}");
        assert!(
            page.contains(">6 s</text>") && !page.contains("3600 s</text>"),
            "{page}"
        );

        assert!(!page.contains("<rect"), "nothing shaded: {page}");

        // A period shaded: a band behind the lines from its start to its end, and its legend.
        let mut shaded = chart.clone();
        shaded.shaded = Shaded {
            label: "breaker not closed",
            periods: vec![(now - HISTORY / 2, now - HISTORY / 4)],
        };
        let mut page = String::new();
        shaded.render(&mut page, now);
        let plot_width = WIDTH - LEFT - RIGHT;
        assert!(
            page.contains(&format!(
                r#"<rect class="band" x="{:.1}" y="{TOP}" width="{:.1}" height="{}"><title>breaker not closed</title></rect>"#,
                LEFT + plot_width / 2.0,
                plot_width / 4.0,
                HEIGHT - TOP - BOTTOM
            )),
            "{page}"
        );
        assert!(
            page.find("<rect").unwrap() < page.find(r#"<path class="line"#).unwrap(),
            "the band behind the line: {page}"
        );
        assert!(
            page.contains(r#"<span class="key band"></span>breaker not closed</li>"#),
            "{page}"
        );
        // One that ended before the chart's reach is neither drawn nor in the legend.
        shaded.shaded.periods = vec![(now - HISTORY * 3, now - HISTORY * 2)];
        let mut page = String::new();
        shaded.render(&mut page, now);
        assert!(
            !page.contains("<rect") && !page.contains("key band"),
            "{page}"
        );

        let mut empty = chart;
        empty.lines[0].values.clear();
        let mut page = String::new();
        empty.render(&mut page, now);
        assert!(page.contains("no samples yet"), "{page}");
    }

    #[test]
    fn a_percentile_under_the_first_bound_is_drawn_at_it_and_written_as_under_it() {
        let now = Instant::now();
        let quantiles = [
            Quantile::AtMost(0.001),
            Quantile::About(0.0075),
            Quantile::Above(3600.0),
        ];
        let chart = Chart {
            id: "orders-handler-duration".into(),
            title: "Handler duration",
            note: None,
            scale: Scale::Seconds,
            lines: ["p50", "p95", "p99"]
                .iter()
                .zip(quantiles)
                .map(|(p, q)| Line {
                    class: p.to_string(),
                    label: p.to_string(),
                    values: vec![(now, Some(q.into()))],
                })
                .collect(),
            limit: None,
            shaded: Shaded::default(),
        };
        let mut page = String::new();
        chart.render(&mut page, now);
        assert!(page.contains("p50 <b>&lt; 1 ms</b>"), "{page}");
        assert!(page.contains("p95 <b>7.5 ms</b>"), "{page}");
        assert!(page.contains("p99 <b>&gt; 60 min</b>"), "{page}");

        // Alone, the p50 is drawn at the bound, not halfway below it.
        let mut under = chart.clone();
        under.lines.truncate(1);
        let mut page = String::new();
        under.render(&mut page, now);
        let (_, top) = ticks(0.001, Scale::Seconds);
        let at = TOP + (HEIGHT - TOP - BOTTOM) * (1.0 - 0.001 / top);
        assert!(
            page.contains(&format!(
                r#"<path class="line p50" d="M{:.1} {at:.1}h0""#,
                WIDTH - RIGHT
            )),
            "{page}"
        );
    }
}
