//! The supervisor's decisions, as plain functions and data tested without I/O: which names are
//! subscriptions, which dead-letter limit `drop()` follows, how far leases are extended, which
//! start failures are worth another attempt, and how long to wait before the next one.

use crate::error::{Code, StartError};
use crate::rules::options::{EXACTLY_ONCE_MIN_LEASE_EXTENSION, Options};
use std::time::Duration;

/// The first wait before reopening a failed stream: short, since most stream failures are a
/// server closing an idle or long-lived stream.
pub const RESTART_BACKOFF_INITIAL: Duration = Duration::from_millis(100);
/// The longest wait between reopening attempts, so an outage costs at most one attempt per 30 s.
pub const RESTART_BACKOFF_MAX: Duration = Duration::from_secs(30);

/// The maximum delivery attempts Pub/Sub applies when a dead-letter policy leaves it unset (0).
pub const DEFAULT_MAX_DELIVERY_ATTEMPTS: u32 = 5;

/// The last attempt a subscription's dead-letter policy allows, as read from the subscription:
/// `None` without a dead-letter topic (nothing is dead-lettered, so `drop()` always acks),
/// else its maximum delivery attempts, or [`DEFAULT_MAX_DELIVERY_ATTEMPTS`] when the policy
/// leaves them unset (0, or a negative number). What a [`Connector`](crate::source::Connector)
/// puts in [`SubscriptionInfo::max_delivery_attempts`](crate::source::SubscriptionInfo).
pub fn dead_letter_limit(dead_letter_topic: &str, max_delivery_attempts: i32) -> Option<u32> {
    if dead_letter_topic.is_empty() {
        return None;
    }
    Some(match u32::try_from(max_delivery_attempts) {
        Ok(0) | Err(_) => DEFAULT_MAX_DELIVERY_ATTEMPTS,
        Ok(n) => n,
    })
}

/// Capped exponential backoff with jitter, as plain data.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Backoff {
    next: Duration,
    max: Duration,
}

impl Backoff {
    /// Starts at `initial`, doubles up to `max`.
    pub(crate) fn new(initial: Duration, max: Duration) -> Self {
        Self { next: initial, max }
    }
    /// The next wait: the current step scaled by `jitter` (in `[0, 1)`) into its upper half, so
    /// restarts after a shared outage spread out. Doubles the step for the time after.
    pub(crate) fn next_delay(&mut self, jitter: f64) -> Duration {
        let step = self.next;
        self.next = (self.next * 2).min(self.max);
        step.mul_f64(0.5 + jitter.clamp(0.0, 1.0) / 2.0)
    }
    /// Things went well again: start over from `initial`.
    pub(crate) fn reset(&mut self, initial: Duration) {
        self.next = initial;
    }
}

/// Checks `projects/{project}/subscriptions/{name}` with Pub/Sub's rules for `name`.
pub(crate) fn validate_subscription_name(name: &str) -> Result<(), StartError> {
    let invalid = || StartError::InvalidName(name.to_string());
    let parts: Vec<&str> = name.split('/').collect();
    let [projects, project, subscriptions, id] = parts.as_slice() else {
        return Err(invalid());
    };
    let id_ok = (3..=255).contains(&id.len())
        && id.starts_with(|c: char| c.is_ascii_alphabetic())
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.~+%".contains(c));
    if *projects != "projects" || project.is_empty() || *subscriptions != "subscriptions" || !id_ok
    {
        return Err(invalid());
    }
    Ok(())
}

/// The dead-letter limit: the registration's, else the subscription's. The flag says both were
/// given and differ (worth one warning).
pub(crate) fn resolve_limit(
    registration: Option<u32>,
    subscription: Option<u32>,
) -> (Option<u32>, bool) {
    let differ = matches!((registration, subscription), (Some(r), Some(s)) if r != s);
    (registration.or(subscription), differ)
}

/// Whether the lease extension in force is shorter than Pub/Sub advises for exactly-once
/// delivery ([`EXACTLY_ONCE_MIN_LEASE_EXTENSION`]), which is worth one warning: a short
/// extension lets network delays expire ack ids, and a refused ack is work done again. The
/// extension is kept as set (the emulator-based soak, for one, needs short ones).
pub(crate) fn short_for_exactly_once(options: &Options, exactly_once: bool) -> bool {
    exactly_once && options.lease_extension() < EXACTLY_ONCE_MIN_LEASE_EXTENSION
}

/// Whether a failed read of the subscription at start is worth another attempt within the
/// start timeout: an unavailable or overloaded server, a transport failure (no code), yes; a
/// request Pub/Sub refused, no.
pub(crate) fn retry_at_start(code: Option<Code>) -> bool {
    matches!(
        code,
        None | Some(
            Code::Unavailable
                | Code::DeadlineExceeded
                | Code::Unknown
                | Code::Internal
                | Code::ResourceExhausted
                | Code::Aborted
                | Code::Cancelled
        )
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_policy_without_a_topic_has_no_limit_and_an_unset_one_is_pub_subs_default() {
        let topic = "projects/p/topics/dead";
        assert_eq!(dead_letter_limit("", 7), None);
        assert_eq!(
            dead_letter_limit(topic, 0),
            Some(DEFAULT_MAX_DELIVERY_ATTEMPTS)
        );
        assert_eq!(
            dead_letter_limit(topic, -1),
            Some(DEFAULT_MAX_DELIVERY_ATTEMPTS)
        );
        assert_eq!(dead_letter_limit(topic, 7), Some(7));
    }

    const SUB: &str = "projects/p/subscriptions/orders";

    #[test]
    fn subscription_names_follow_pub_sub_rules() {
        assert_eq!(validate_subscription_name(SUB), Ok(()));
        for bad in [
            "orders",
            "projects/p/subscriptions/ab",
            "projects/p/subscriptions/1abc",
            "projects/p/topics/orders",
            "projects//subscriptions/orders",
            "projects/p/subscriptions/or ders",
        ] {
            assert!(validate_subscription_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn limits_resolve_registration_first_and_flag_a_mismatch() {
        assert_eq!(resolve_limit(None, Some(5)), (Some(5), false));
        assert_eq!(resolve_limit(Some(3), Some(5)), (Some(3), true));
        assert_eq!(resolve_limit(Some(5), Some(5)), (Some(5), false));
        assert_eq!(resolve_limit(None, None), (None, false));
    }

    #[test]
    fn backoff_doubles_up_to_the_cap_and_resets() {
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_millis(400));
        let full: Vec<_> = (0..4).map(|_| b.next_delay(1.0)).collect();
        assert_eq!(
            full,
            [100, 200, 400, 400].map(Duration::from_millis).to_vec()
        );
        assert_eq!(
            b.next_delay(0.0),
            Duration::from_millis(200),
            "jitter halves at most"
        );
        b.reset(Duration::from_millis(100));
        assert_eq!(b.next_delay(1.0), Duration::from_millis(100));
    }

    #[test]
    fn a_short_lease_extension_on_an_exactly_once_subscription_is_worth_a_warning() {
        let short = Options {
            max_lease_extension: Some(Duration::from_secs(10)),
            ..Options::default()
        };
        assert!(short_for_exactly_once(&short, true));
        assert!(!short_for_exactly_once(&short, false));
        assert!(!short_for_exactly_once(&Options::default(), true));
        // A budget shorter than a minute shortens the default extension too.
        let budget = Options {
            max_lease: Duration::from_secs(30),
            ..Options::default()
        };
        assert!(short_for_exactly_once(&budget, true));
    }

    #[test]
    fn only_transient_start_failures_are_retried() {
        assert!(retry_at_start(None), "a transport failure");
        assert!(retry_at_start(Some(Code::Unavailable)));
        assert!(!retry_at_start(Some(Code::InvalidArgument)));
        assert!(!retry_at_start(Some(Code::Unauthenticated)));
    }
}
