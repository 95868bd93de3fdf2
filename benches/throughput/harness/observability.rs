//! Tracing for the traces-on runs: the OpenTelemetry layer that `--otel` installs, and a
//! `--pipeline-only` child with traces on or off. A global subscriber cannot be removed, so each
//! run of the comparison is a process of its own. (The runtime's counters and histograms cannot
//! be turned off: both sides pay for them.)
//!
//! Uses `opentelemetry_sdk` with an exporter that discards, `tracing-subscriber`, and this
//! binary as the child.

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// Takes the spans and drops them: the cost measured is making and exporting them.
#[derive(Debug)]
struct Discard;

impl SpanExporter for Discard {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        std::hint::black_box(batch);
        Ok(())
    }
}

/// Installs the OpenTelemetry layer, with a batch processor as the service uses: every
/// message's span exported (to [`Discard`]), as the service does with a collector configured.
pub(crate) fn install() -> SdkTracerProvider {
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(Discard)
        .build();
    tracing_subscriber::registry()
        .with(
            tracing_opentelemetry::layer()
                .with_tracer(provider.tracer("bench"))
                .with_filter(
                    tracing_subscriber::filter::Targets::new()
                        .with_default(tracing::Level::INFO)
                        .with_target("leasehold_actors", tracing::Level::DEBUG),
                ),
        )
        .init();
    provider
}

/// The pipeline alone on 500,000 messages in a child of this binary, traces off (`None`) or on
/// at `trace_sample_ratio` `Some(ratio)`: its µs of CPU per message.
pub(crate) fn pipeline_cpu(otel: Option<f64>) -> f64 {
    let mut command = std::process::Command::new(std::env::current_exe().unwrap());
    command.args(["--pipeline-only", "--messages", "500000"]);
    if let Some(ratio) = otel {
        command
            .arg("--otel")
            .env("LEASEHOLD_BENCH_TRACE_RATIO", ratio.to_string());
    }
    let output = command.output().unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    text.split("cpu_us_per_message: ")
        .nth(1)
        .and_then(|rest| rest.split(',').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no figure in: {text}"))
}
