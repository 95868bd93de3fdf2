//! What is measured and rendered: the subscriptions a service runs as plain data, their
//! Prometheus metrics, the charts' history, and the status page. Everything here only reads
//! (the runtime's atomics, a replay's report); nothing here starts, stops or serves.
//!
//! From the bottom up:
//! - `replays.rs`: a replay's report file, and the command that starts one;
//! - `running.rs`: one subscription the service runs ([`running::Running`]);
//! - `families.rs`, `counters.rs`, `gauges.rs`, `outbox.rs` (the outbox relay's, also its
//!   status rows), `metrics.rs`: the metrics, read at each scrape;
//! - `history.rs`: the last minutes, sampled for the charts;
//! - `html.rs`, `charts.rs`, `dead_letters.rs`, `status.rs`: the status page;
//! - `schemas.rs`: a schema handler's decoder, its metrics and its section of the page.
//!
//! Uses the runtime and [`crate::config`]'s plain values only; the HTTP surface and the
//! commands above use it.

mod charts;
mod counters;
mod dead_letters;
mod families;
mod gauges;
pub(crate) mod history;
mod html;
pub(crate) mod metrics;
mod outbox;
pub(crate) mod replays;
pub(crate) mod running;
mod schemas;
pub(crate) mod status;
