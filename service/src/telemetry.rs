//! Logs and traces: a `tracing` subscriber that prints logs and, when an OTLP collector is
//! configured, exports each message's span as an OpenTelemetry trace.
//!
//! Leasehold's per-message span follows OpenTelemetry's messaging conventions for Pub/Sub (span
//! name `<subscription> process`, `messaging.system = gcp_pubsub`, the message id, the delivery
//! attempt, the ordering key and the result as `messaging.gcp_pubsub.result`) and continues the
//! publisher's trace from the `googclient_traceparent` attribute, so a trace runs from any of
//! Google's publishers through the handler. The OpenTelemetry versions are the ones
//! google-cloud-pubsub itself uses, so one global provider serves both.

use crate::config::TelemetryConfig;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

/// Telemetry could not be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TelemetryError {
    /// The log filter does not parse.
    #[error("invalid log filter {filter:?}")]
    Filter {
        /// The filter.
        filter: String,
        /// Why.
        #[source]
        cause: tracing_subscriber::filter::ParseError,
    },
    /// The OTLP exporter could not be built.
    #[error("cannot export traces to {endpoint}")]
    Exporter {
        /// The collector.
        endpoint: String,
        /// Why.
        #[source]
        cause: opentelemetry_otlp::ExporterBuildError,
    },
    /// A global `tracing` subscriber was installed already.
    #[error("a tracing subscriber is installed already")]
    AlreadyInstalled(#[source] tracing_subscriber::util::TryInitError),
}

/// Flushes and shuts the trace exporter down when dropped: keep it until the service stops.
#[derive(Debug)]
#[must_use = "dropping the guard shuts the trace exporter down"]
pub struct TelemetryGuard(Option<SdkTracerProvider>);

impl Drop for TelemetryGuard {
    fn drop(&mut self) {
        if let Some(provider) = self.0.take() {
            let _ = provider.shutdown();
        }
    }
}

/// Installs the global `tracing` subscriber: logs filtered by `RUST_LOG` or the configured
/// filter, and, with an OTLP endpoint configured, an OpenTelemetry layer exporting traces.
pub fn init(config: &TelemetryConfig) -> Result<TelemetryGuard, TelemetryError> {
    let filter = match EnvFilter::try_from_default_env() {
        Ok(filter) => filter,
        Err(_) => {
            EnvFilter::try_new(&config.log_filter).map_err(|cause| TelemetryError::Filter {
                filter: config.log_filter.clone(),
                cause,
            })?
        }
    };
    let provider = match &config.otlp_endpoint {
        None => None,
        Some(endpoint) => {
            use opentelemetry_otlp::WithExportConfig;
            let exporter = opentelemetry_otlp::SpanExporter::builder()
                .with_tonic()
                .with_endpoint(endpoint.clone())
                .build()
                .map_err(|cause| TelemetryError::Exporter {
                    endpoint: endpoint.clone(),
                    cause,
                })?;
            Some(
                SdkTracerProvider::builder()
                    .with_batch_exporter(exporter)
                    .with_resource(
                        opentelemetry_sdk::Resource::builder()
                            .with_service_name(config.service_name.clone())
                            .build(),
                    )
                    .build(),
            )
        }
    };
    let otel = provider.as_ref().map(|provider| {
        opentelemetry::global::set_tracer_provider(provider.clone());
        // Each message's span is at debug level (so logging at info costs nothing per message);
        // exported traces want it.
        tracing_opentelemetry::layer()
            .with_tracer(provider.tracer("leasehold"))
            .with_filter(
                tracing_subscriber::filter::Targets::new()
                    .with_default(tracing::Level::INFO)
                    .with_target("leasehold_actors", tracing::Level::DEBUG),
            )
    });
    tracing_subscriber::registry()
        // Logs on stderr (stdout is what a command prints: a dry run's list, a summary), in
        // colour only on a terminal.
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
                .with_filter(filter),
        )
        .with(otel)
        .try_init()
        .map_err(TelemetryError::AlreadyInstalled)?;
    Ok(TelemetryGuard(provider))
}
