//! The service's logs and traces: the `[telemetry]` table, [`TelemetryConfig`], and its
//! defaults. What reads it is `telemetry.rs`.
//!
//! Owns [`TelemetryConfig`]. Uses nothing of the runtime.

use serde::Deserialize;

/// Logs and traces.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct TelemetryConfig {
    /// The log filter, in `tracing-subscriber`'s `EnvFilter` syntax (default `info`; `RUST_LOG`
    /// wins when set).
    #[serde(default = "default_filter")]
    pub log_filter: String,
    /// An OTLP/gRPC collector to export traces to (`http://collector:4317`); none by default.
    pub otlp_endpoint: Option<String>,
    /// The `service.name` of the exported traces (default `leasehold`).
    #[serde(default = "default_service_name")]
    pub service_name: String,
    /// The share of messages traced, for every subscription that does not set its own
    /// `trace_sample_ratio` (default 0.01: exporting every message's span costs about three
    /// and a half times the CPU of consuming it). Messages whose publisher sampled its trace are
    /// always traced.
    #[serde(default = "default_sample_ratio")]
    pub trace_sample_ratio: f64,
}

fn default_sample_ratio() -> f64 {
    0.01
}

fn default_filter() -> String {
    "info".into()
}

fn default_service_name() -> String {
    "leasehold".into()
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        Self {
            log_filter: default_filter(),
            otlp_endpoint: None,
            service_name: default_service_name(),
            trace_sample_ratio: default_sample_ratio(),
        }
    }
}
