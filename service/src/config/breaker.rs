//! A subscription's outage breaker in the service: the `breaker = { ... }` table of
//! `[subscriptions.KEY]`, and the [`Breaker`] it sets on the registration.
//!
//! Owns [`BreakerConfig`]. Uses the runtime's [`Breaker`] only: its ranges are checked where
//! every option is, by `Registration::validate` when the subscription starts, whose refusal
//! names the key (`breaker.cooldown must be from 100 ms to 1 h`).

use leasehold::Breaker;
use serde::Deserialize;
use serde::de::{self, Deserializer, Unexpected, Visitor};
use std::time::Duration;

/// The outage breaker of a subscription (`breaker = { ... }`; no table: no breaker). Each key is
/// the [`Breaker`] field of the same name; an unset key keeps the default
/// (`leasehold::defaults::DEFAULT_BREAKER_*`), or the value the binder set in code.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct BreakerConfig {
    /// [`Breaker::window`]: how far back the failure ratio looks.
    #[serde(default, with = "humantime_serde")]
    pub window: Option<Duration>,
    /// [`Breaker::min_messages`]: the fewest messages in the window before the ratio counts.
    pub min_messages: Option<u32>,
    /// [`Breaker::failure_ratio`]: the share of failures in the window that trips it.
    pub failure_ratio: Option<f64>,
    /// [`Breaker::consecutive_failures`]: failures of different messages in a row that trip
    /// it; `0` trips on the ratio only (`None` in code). A whole number: `true` and `false`
    /// are refused.
    #[serde(default, deserialize_with = "whole_number")]
    pub consecutive_failures: Option<u32>,
    /// [`Breaker::cooldown`]: the first cooldown after a trip.
    #[serde(default, with = "humantime_serde")]
    pub cooldown: Option<Duration>,
    /// The longest cooldown (the second argument of [`Breaker::cooldown`]): each failed try
    /// doubles the cooldown up to it.
    #[serde(default, with = "humantime_serde")]
    pub max_cooldown: Option<Duration>,
    /// The messages of [`Breaker::read_ahead`]: what may wait read ahead while it is open.
    pub read_ahead_messages: Option<usize>,
    /// The payload bytes of [`Breaker::read_ahead`].
    pub read_ahead_bytes: Option<usize>,
}

/// `consecutive_failures`: a whole number, not a boolean. The configuration crate would read
/// `false` as 0 and `true` as 1, and 1 trips the breaker on the first failure.
fn whole_number<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<u32>, D::Error> {
    struct WholeNumber;
    impl Visitor<'_> for WholeNumber {
        type Value = Option<u32>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a whole number of failures (0: trip on the failure ratio only)")
        }
        fn visit_u64<E: de::Error>(self, n: u64) -> Result<Self::Value, E> {
            u32::try_from(n)
                .map(Some)
                .map_err(|_| E::invalid_value(Unexpected::Unsigned(n), &self))
        }
        fn visit_i64<E: de::Error>(self, n: i64) -> Result<Self::Value, E> {
            match u64::try_from(n) {
                Ok(n) => self.visit_u64(n),
                Err(_) => Err(E::invalid_value(Unexpected::Signed(n), &self)),
            }
        }
    }
    deserializer.deserialize_any(WholeNumber)
}

impl BreakerConfig {
    /// `base` (the breaker set in code, or the default one) with every key this table sets.
    pub fn breaker(&self, base: Breaker) -> Breaker {
        let mut breaker = base;
        if let Some(window) = self.window {
            breaker = breaker.window(window);
        }
        if let Some(n) = self.min_messages {
            breaker = breaker.min_messages(n);
        }
        if let Some(ratio) = self.failure_ratio {
            breaker = breaker.failure_ratio(ratio);
        }
        if let Some(n) = self.consecutive_failures {
            breaker = breaker.consecutive_failures((n > 0).then_some(n));
        }
        if self.cooldown.is_some() || self.max_cooldown.is_some() {
            breaker = breaker.cooldown(
                self.cooldown.unwrap_or(breaker.cooldown),
                self.max_cooldown.unwrap_or(breaker.max_cooldown),
            );
        }
        if let Some(n) = self.read_ahead_messages {
            breaker.read_ahead_messages = Some(n);
        }
        if let Some(n) = self.read_ahead_bytes {
            breaker.read_ahead_bytes = Some(n);
        }
        breaker
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use leasehold::defaults::{DEFAULT_BREAKER_COOLDOWN, DEFAULT_BREAKER_MAX_COOLDOWN};

    #[test]
    fn an_empty_table_is_the_base_breaker_and_each_key_sets_its_field() {
        let base = Breaker::new().min_messages(7);
        assert_eq!(BreakerConfig::default().breaker(base), base);
        let only_max = BreakerConfig {
            max_cooldown: Some(Duration::from_secs(90)),
            ..BreakerConfig::default()
        };
        let breaker = only_max.breaker(Breaker::new());
        assert_eq!(
            (breaker.cooldown, breaker.max_cooldown),
            (DEFAULT_BREAKER_COOLDOWN, Duration::from_secs(90))
        );
        assert_eq!(breaker.min_messages, Breaker::new().min_messages);
        let ratio_only = BreakerConfig {
            consecutive_failures: Some(0),
            ..BreakerConfig::default()
        };
        assert_eq!(
            ratio_only.breaker(Breaker::new()).consecutive_failures,
            None
        );
        let three = BreakerConfig {
            consecutive_failures: Some(3),
            cooldown: Some(Duration::from_secs(2)),
            ..BreakerConfig::default()
        };
        let breaker = three.breaker(Breaker::new());
        assert_eq!(breaker.consecutive_failures, Some(3));
        assert_eq!(
            (breaker.cooldown, breaker.max_cooldown),
            (Duration::from_secs(2), DEFAULT_BREAKER_MAX_COOLDOWN)
        );
    }
}
