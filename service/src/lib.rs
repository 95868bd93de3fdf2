//! Leasehold as a service: one process that consumes several subscriptions, configured from a
//! file and the environment, and serves Prometheus metrics, health and readiness for an
//! orchestrator, and a status page for people.
//!
//! ```no_run
//! use leasehold::{Delivery, Outcome};
//! use leasehold_service::{Service, config};
//!
//! #[derive(serde::Deserialize)]
//! struct Order { id: u64 }
//!
//! async fn on_order(order: Order, delivery: Delivery) -> Outcome {
//!     if order.id == 0 { delivery.drop() } else { delivery.ack() }
//! }
//!
//! #[actix_rt::main]
//! async fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let config = config::load("leasehold.toml")?;
//!     let _telemetry = leasehold_service::telemetry::init(&config.telemetry)?;
//!     // Handlers are code, bound to the subscriptions of the configuration by their key.
//!     Service::new(config).json("orders", on_order).run().await?;
//!     Ok(())
//! }
//! ```
//!
//! The HTTP endpoints run on actix-web with its own signal handling off: the service's drain
//! is in charge of SIGTERM and SIGINT, and readiness turns false when the drain begins.
//!
//! The manual is the crate's `README.md` (start, configure, deploy, operate); every key, metric,
//! alert and status-page section is in `docs/reference.md`, which tests check against the code.
//!
//! The crate by role, from the bottom up (ARCHITECTURE.md has the map):
//! - [`config`]: the configuration file and its environment overrides;
//! - `error.rs`: [`ServiceError`];
//! - [`telemetry`]: logs, and traces exported over OTLP;
//! - `observe/`: what is measured and rendered (the metrics, the charts' history, the status
//!   page);
//! - `http/`: the HTTP server and its endpoints;
//! - `builder.rs`, `serve.rs`: [`Service`], bound and run;
//! - [`replay`]: the binary's arguments and `replay KEY`.
#![warn(missing_docs)]
#![forbid(unsafe_code)]

mod builder;
pub mod config;
mod error;
mod http;
mod observe;
pub mod replay;
mod serve;
pub mod telemetry;

pub use builder::{Service, Summary};
pub use error::ServiceError;

/// The README's example, compiled as a doctest so that it stays true.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
