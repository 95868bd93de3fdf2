//! What an operator looks at, against Google's Pub/Sub emulator (the one `PUBSUB_EMULATOR_HOST`
//! names, or one this binary starts): the status page's charts in headless Chromium, the
//! alert and recording rules under `promtool test rules`, and a real Prometheus scraping the
//! service, evaluating the rules and the Grafana dashboard's queries.
//!
//! Needs Debian's `chromium` and `prometheus` packages (the latter provides `promtool`);
//! `cargo xtask setup` installs both. Without them the tests fail and say so.

mod charts;
mod prometheus;
mod rules;
mod support;
