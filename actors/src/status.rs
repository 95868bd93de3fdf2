//! What a running subscription reports: counters and histograms ([`StatsSnapshot`],
//! [`Histograms`]), its [`State`] and [`Health`], and the [`SupervisionEvent`]s its watchers
//! hear. The actors write it; [`Subscription`](crate::Subscription) reads it.
//!
//! May use: `rt`, `rules`.

pub(crate) mod breaker;
pub(crate) mod shared;
pub(crate) mod snapshot;
pub(crate) mod stats;

pub use crate::rt::lifeline::Role;
pub use crate::rules::breaker::BreakerState;
pub use crate::rules::flow::InFlight;
pub use breaker::BreakerReport;
pub use shared::{Connectivity, Failure, Health, HealthReason, State, SupervisionEvent};
pub use snapshot::StatsSnapshot;
pub use stats::{FailureKind, FailureRecord, HistogramSnapshot, Histograms, LoadReport};
