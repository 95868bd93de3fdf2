//! The figures of a table: medians with their spread, the cells they print as, and the ratios
//! of two medians.
//!
//! Uses the runs of the harness ([`Run`], [`Outcome`]) and nothing else.

use crate::harness::child::{Measured, Outcome};
use crate::harness::clock::Run;

/// A median with its minimum and maximum.
pub(crate) type Spread = (f64, f64, f64);

/// The median, minimum and maximum of `v` (not empty).
pub(crate) fn median(mut v: Vec<f64>) -> Spread {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

/// Medians with their spread: messages per second, µs of CPU per message, allocations per
/// message.
pub(crate) type Summary = (Spread, Spread, Spread);

pub(crate) fn summary(runs: &[Run]) -> Summary {
    (
        median(runs.iter().map(|r| r.per_second).collect()),
        median(runs.iter().map(|r| r.cpu_us_per_message).collect()),
        median(runs.iter().map(|r| r.allocations_per_message).collect()),
    )
}

/// Medians [min–max] of one figure over a side's successful runs; `None` when it has none.
pub(crate) fn spread(
    runs: &[Outcome],
    figure: impl Fn(&Measured) -> Option<f64>,
) -> Option<Spread> {
    let values: Vec<f64> = runs.iter().flatten().filter_map(figure).collect();
    (!values.is_empty()).then(|| median(values))
}

/// `median [min–max]`, or `–` for a figure no run has.
pub(crate) fn cell(value: Option<Spread>, decimals: usize) -> String {
    match value {
        Some((m, lo, hi)) => format!("{m:.decimals$} [{lo:.decimals$}–{hi:.decimals$}]"),
        None => "–".to_string(),
    }
}

/// The median alone, or `–`.
pub(crate) fn median_cell(value: Option<Spread>, decimals: usize) -> String {
    match value {
        Some((m, _, _)) => format!("{m:.decimals$}"),
        None => "–".to_string(),
    }
}

/// The ratio of two medians.
pub(crate) fn ratio(a: Option<Spread>, b: Option<Spread>, decimals: usize) -> String {
    match (a, b) {
        (Some((a, _, _)), Some((b, _, _))) => format!("{:.decimals$}", a / b),
        _ => "–".to_string(),
    }
}
