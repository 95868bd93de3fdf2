//! How one metric family is written in OpenMetrics text: a counter or gauge family, a counter
//! of seconds, a histogram family, and the state's label value. The writing every metric module
//! shares.
//!
//! Uses prometheus-client and the runtime's snapshots; nothing of the service.

use leasehold::status::{HistogramSnapshot, State};
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Unit;

type Labels<'a> = [(&'static str, &'a str)];

/// One counter or gauge family: its value for each subscription (and label set).
pub(super) fn family<'a>(
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

/// One counter family in seconds, written with its fraction (a [`family`] counter is a whole
/// number): its value for each subscription.
pub(super) fn seconds_counter<'a>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    values: impl IntoIterator<Item = (&'a str, f64)>,
) -> Result<(), std::fmt::Error> {
    let mut metric =
        encoder.encode_descriptor(name, help, Some(&Unit::Seconds), MetricType::Counter)?;
    for (key, seconds) in values {
        let labels: &Labels = &[("subscription", key)];
        metric
            .encode_family(&labels)?
            .encode_counter::<NoLabelSet, _, u64>(&seconds, None)?;
    }
    Ok(())
}

/// One histogram family, in seconds (`unit`) or in plain counts (none).
pub(super) fn histogram(
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

pub(super) const STATES: [&str; 5] = ["starting", "running", "draining", "stopped", "failed"];

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
