//! A subscription's outbox relay in the service: the `outbox = { ... }` table of
//! `[subscriptions.KEY]`, and the [`RelayOptions`] it sets on the relay of the store bound to
//! the key with `Service::outbox`.
//!
//! Owns [`OutboxConfig`]. Uses the relay's [`RelayOptions`] only: their ranges are checked by
//! `RelayOptions::validate` before anything starts, and a refusal names the key
//! (`outbox.lease must be from ...`).

use leasehold_relay::RelayOptions;
use serde::Deserialize;
use std::time::Duration;

/// The relay of a subscription's transactional outbox (`outbox = { ... }`): each key is the
/// [`RelayOptions`] field of the same name (an unset key keeps its default,
/// `leasehold_relay::defaults`), and `relay = false` runs no relay in this process (its rows
/// are sent by the other replicas' relays).
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct OutboxConfig {
    /// Whether this process runs the relay (default `true`).
    pub relay: Option<bool>,
    /// [`RelayOptions::max_batch`]: rows leased at most in one round.
    pub max_batch: Option<usize>,
    /// [`RelayOptions::poll_interval`]: the longest wait without a wake-up.
    #[serde(default, with = "humantime_serde")]
    pub poll_interval: Option<Duration>,
    /// [`RelayOptions::gather`]: the wait after a wake-up before the lease.
    #[serde(default, with = "humantime_serde")]
    pub gather: Option<Duration>,
    /// [`RelayOptions::lease`]: how long a relay's lease on its rows lasts.
    #[serde(default, with = "humantime_serde")]
    pub lease: Option<Duration>,
    /// [`RelayOptions::send_timeout`]: how long a round's sends may take.
    #[serde(default, with = "humantime_serde")]
    pub send_timeout: Option<Duration>,
    /// [`RelayOptions::retry_delay`]: the first wait after a failed send.
    #[serde(default, with = "humantime_serde")]
    pub retry_delay: Option<Duration>,
    /// [`RelayOptions::max_retry_delay`]: the longest wait after failed sends.
    #[serde(default, with = "humantime_serde")]
    pub max_retry_delay: Option<Duration>,
    /// [`RelayOptions::retention`]: how long sent rows are kept.
    #[serde(default, with = "humantime_serde")]
    pub retention: Option<Duration>,
    /// [`RelayOptions::sweep_interval`]: how often old sent rows are deleted.
    #[serde(default, with = "humantime_serde")]
    pub sweep_interval: Option<Duration>,
    /// [`RelayOptions::sweep_batch`]: rows one delete statement takes at most.
    pub sweep_batch: Option<usize>,
    /// [`RelayOptions::backlog_interval`]: how often the backlog is read for the metrics.
    #[serde(default, with = "humantime_serde")]
    pub backlog_interval: Option<Duration>,
}

impl OutboxConfig {
    /// Whether this process runs the relay.
    pub fn runs_relay(&self) -> bool {
        self.relay.unwrap_or(true)
    }

    /// The relay's options: the defaults with every key this table sets, checked; a refusal
    /// says which key (`outbox.lease must be from 40s to ...`).
    pub fn options(&self) -> Result<RelayOptions, String> {
        let mut options = RelayOptions::default();
        macro_rules! set {
            ($($key:ident),*) => {$(
                if let Some(value) = self.$key {
                    options = options.$key(value);
                }
            )*};
        }
        set!(
            max_batch,
            poll_interval,
            gather,
            lease,
            send_timeout,
            retry_delay,
            max_retry_delay,
            retention,
            sweep_interval,
            sweep_batch,
            backlog_interval
        );
        options
            .validate()
            .map_err(|e| format!("outbox.{} {}", e.option, e.problem))?;
        Ok(options)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_key_sets_its_option_and_a_value_out_of_range_names_its_key() {
        let table = OutboxConfig {
            max_batch: Some(50),
            poll_interval: Some(Duration::from_millis(250)),
            retention: Some(Duration::from_secs(3600)),
            ..OutboxConfig::default()
        };
        let options = table.options().unwrap();
        assert_eq!(options.max_batch, 50);
        assert_eq!(options.poll_interval, Duration::from_millis(250));
        assert_eq!(options.retention, Duration::from_secs(3600));
        assert_eq!(options.lease, leasehold_relay::defaults::DEFAULT_LEASE);
        assert!(table.runs_relay());
        let short = OutboxConfig {
            lease: Some(Duration::from_secs(5)),
            ..OutboxConfig::default()
        };
        let refusal = short.options().unwrap_err();
        assert!(
            refusal.starts_with("outbox.lease must be from"),
            "{refusal}"
        );
        let off = OutboxConfig {
            relay: Some(false),
            ..OutboxConfig::default()
        };
        assert!(!off.runs_relay());
    }
}
