//! The service binary's arguments: serve the configuration ([`Cli`]), or `replay KEY` with what
//! to replay and how ([`ReplayArgs`]), turned into the runtime's [`ReplayOptions`].
//!
//! Uses [`crate::config`] to load the file the arguments name.

use crate::config::{ConfigError, ServiceConfig};
use leasehold::replay::{Filter, ReplayOptions};
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

/// How often a replay logs its progress when stderr is not a terminal.
pub const REPLAY_LOG_EVERY: Duration = Duration::from_secs(10);

/// What the service binary was asked to do: serve its configuration, or replay one
/// subscription's dead letters.
#[derive(Debug, Clone, clap::Parser)]
#[command(about = "Leasehold: consume the configuration's subscriptions, or replay dead letters")]
pub struct Cli {
    /// The configuration file (TOML; `LEASEHOLD__...` environment variables override it), as
    /// the first argument.
    #[arg(value_name = "CONFIG")]
    pub path: Option<PathBuf>,
    /// The configuration file, named anywhere on the line.
    #[arg(long, short, env = "LEASEHOLD_CONFIG", global = true)]
    pub config: Option<PathBuf>,
    /// What to do; serving when none is named.
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// The service binary's commands.
#[derive(Debug, Clone, clap::Subcommand)]
#[non_exhaustive]
pub enum Command {
    /// Consume the configuration's subscriptions until SIGTERM or SIGINT (the default).
    Serve,
    /// Run a subscription's handler over its dead letters, without republishing.
    Replay(Box<ReplayArgs>),
}

impl Cli {
    /// The configuration the arguments name: the file, or `None` when none was given.
    pub fn load_config(&self) -> Result<Option<ServiceConfig>, ConfigError> {
        self.path
            .as_ref()
            .or(self.config.as_ref())
            .map(crate::config::load)
            .transpose()
    }
}

/// `replay KEY [OPTIONS]`: what to replay and how.
#[derive(Debug, Clone, clap::Args)]
pub struct ReplayArgs {
    /// The subscription's key in the configuration (`orders` for `[subscriptions.orders]`).
    pub key: String,
    /// The subscription on the dead-letter topic to replay from (default: the key's
    /// `dead_letter_subscription`).
    #[arg(long, value_name = "SUBSCRIPTION")]
    pub from: Option<String>,
    /// At most this many messages a second handed to the handler.
    #[arg(long, value_name = "PER_SECOND", allow_negative_numbers = true)]
    pub rate: Option<f64>,
    /// At most this many messages handed to the handler.
    #[arg(long, value_name = "N")]
    pub max: Option<u64>,
    /// Only the message with this id (the dead-letter copy's); repeat for more.
    #[arg(long = "id", value_name = "MESSAGE_ID")]
    pub ids: Vec<String>,
    /// Only messages whose attribute KEY is VALUE; repeat: every pair must match.
    #[arg(long = "attribute", value_name = "KEY=VALUE", value_parser = attribute)]
    pub attributes: Vec<(String, String)>,
    /// Only messages dead-lettered at or after this time (RFC 3339, `2026-12-01T10:00:00Z`).
    #[arg(long, value_name = "TIME", value_parser = time)]
    pub published_after: Option<SystemTime>,
    /// Only messages dead-lettered before this time (RFC 3339, or `now`: what was there when
    /// the run started, so that it ends while new dead letters keep arriving).
    #[arg(long, value_name = "TIME", value_parser = time)]
    pub published_before: Option<SystemTime>,
    /// List each candidate (id, publish time, Pub/Sub's dead-letter attributes, attribute keys,
    /// size) and settle nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// End after this long without a message not seen before (`10s`, `1m`).
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub idle: Option<Duration>,
    /// Serve this run's status page and `/metrics` (the `leasehold_replay_*` counters) on this
    /// address while it runs (`127.0.0.1:9091`); not served by default.
    #[arg(long, value_name = "ADDRESS")]
    pub http: Option<String>,
}

fn attribute(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((key, value)) if !key.is_empty() => Ok((key.to_string(), value.to_string())),
        _ => Err(format!("expected KEY=VALUE, not {text:?}")),
    }
}

fn time(text: &str) -> Result<SystemTime, String> {
    if text == "now" {
        return Ok(SystemTime::now());
    }
    humantime::parse_rfc3339_weak(text)
        .map_err(|e| format!("expected an RFC 3339 time such as 2026-12-01T10:00:00Z, or now: {e}"))
}

impl ReplayArgs {
    /// The run's options, checked against their ranges.
    pub fn options(&self) -> Result<ReplayOptions, leasehold::error::InvalidOption> {
        let mut filter = Filter::new();
        for id in &self.ids {
            filter = filter.message_id(id);
        }
        for (key, value) in &self.attributes {
            filter = filter.attribute(key, value);
        }
        if let Some(t) = self.published_after {
            filter = filter.published_after(t);
        }
        if let Some(t) = self.published_before {
            filter = filter.published_before(t);
        }
        let mut options = ReplayOptions::new().filter(filter);
        if let Some(rate) = self.rate {
            options = options.rate(rate);
        }
        if let Some(max) = self.max {
            options = options.max(max);
        }
        if let Some(idle) = self.idle {
            options = options.idle(idle);
        }
        if self.dry_run {
            options = options.dry_run();
        }
        options.validate()?;
        Ok(options)
    }
}
