//! `RelayOptions`: every tunable of a relay, each default a named constant saying why, and
//! their ranges, checked by `validate`.

use std::time::Duration;

/// Rows a relay leases (and sends) at most in one round, by default: one publish request takes
/// up to 1,000 messages, and a round's rows go out in a few requests per topic while the next
/// round's lease waits for them.
pub const DEFAULT_MAX_BATCH: usize = 500;
/// How long a relay waits for a wake-up before it looks anyway, by default: the bound on how
/// late a row is seen when no wake-up reaches this relay (Spanner's commits in other
/// processes, a lost `LISTEN` connection), and on how late a failed row is tried again past
/// its wait.
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_secs(1);
/// How long a relay waits after a wake-up before it leases, by default: the commits of that
/// while go out in one round (one lease, one publish request, one mark) instead of a round
/// each. Measured on a replica committing about 1,000 messages a second with a relay beside it:
/// without it, the relay took a round per commit (and one more per `NOTIFY` of the same
/// commit).
pub const DEFAULT_GATHER: Duration = Duration::from_millis(5);
/// How long a relay's lease on its rows lasts, by default: a relay that dies holding rows
/// leaves them to the others this long. Well above [`DEFAULT_SEND_TIMEOUT`], so that a live
/// relay's lease does not lapse while it sends.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(60);
/// How long one round's sends may take, by default, before the rows not yet sent count as
/// failed (`unavailable`) and wait for a retry: Google's publisher retries transient errors
/// within it.
pub const DEFAULT_SEND_TIMEOUT: Duration = Duration::from_secs(20);
/// The first wait before a row whose send failed is tried again, by default; it doubles with
/// each failure of the row, up to [`DEFAULT_MAX_RETRY_DELAY`].
pub const DEFAULT_RETRY_DELAY: Duration = Duration::from_secs(1);
/// The longest wait before a failed row is tried again, by default. A missing topic or a
/// refused permission waits at least a minute: it is fixed by a person, not by time.
pub const DEFAULT_MAX_RETRY_DELAY: Duration = Duration::from_secs(5 * 60);
/// How long sent rows are kept, by default: 7 days, NServiceBus's default for its outbox's
/// deduplication data, and the longest Pub/Sub retains a message.
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(7 * 24 * 60 * 60);
/// How often a relay deletes sent rows past the retention, by default.
pub const DEFAULT_SWEEP_INTERVAL: Duration = Duration::from_secs(60);
/// Rows one sweep statement deletes at most, by default: short statements, no long lock;
/// a sweep runs them one after the other until fewer are left.
pub const DEFAULT_SWEEP_BATCH: usize = 1_000;
/// How often a relay reads the backlog (pending rows, the oldest one's age) for its stats.
pub const DEFAULT_BACKLOG_INTERVAL: Duration = Duration::from_secs(5);
/// The longest lease, retention and intervals accepted: a year.
const LONGEST: Duration = Duration::from_secs(365 * 24 * 60 * 60);

/// A relay's tunables; every field has a default ([`RelayOptions::default`]) and a range
/// ([`validate`](Self::validate)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RelayOptions {
    /// Rows leased at most in one round, from 1 to 10,000 ([`DEFAULT_MAX_BATCH`]).
    pub max_batch: usize,
    /// The longest wait without a wake-up, from 10 ms to 1 h ([`DEFAULT_POLL_INTERVAL`]).
    pub poll_interval: Duration,
    /// The wait after a wake-up before the lease, from 0 to 1 s ([`DEFAULT_GATHER`]).
    pub gather: Duration,
    /// A lease's length, at least twice `send_timeout` ([`DEFAULT_LEASE`]).
    pub lease: Duration,
    /// How long a round's sends may take, from 1 s ([`DEFAULT_SEND_TIMEOUT`]).
    pub send_timeout: Duration,
    /// The first wait after a failed send, from 10 ms ([`DEFAULT_RETRY_DELAY`]).
    pub retry_delay: Duration,
    /// The longest wait after failed sends, at least `retry_delay`
    /// ([`DEFAULT_MAX_RETRY_DELAY`]).
    pub max_retry_delay: Duration,
    /// How long sent rows are kept, from 1 minute to a year ([`DEFAULT_RETENTION`]).
    pub retention: Duration,
    /// How often old sent rows are deleted, from 1 s ([`DEFAULT_SWEEP_INTERVAL`]).
    pub sweep_interval: Duration,
    /// Rows one delete statement takes at most, from 1 to 100,000 ([`DEFAULT_SWEEP_BATCH`]).
    pub sweep_batch: usize,
    /// How often the backlog is read for the stats, from 100 ms
    /// ([`DEFAULT_BACKLOG_INTERVAL`]).
    pub backlog_interval: Duration,
}

impl Default for RelayOptions {
    fn default() -> Self {
        Self {
            max_batch: DEFAULT_MAX_BATCH,
            poll_interval: DEFAULT_POLL_INTERVAL,
            gather: DEFAULT_GATHER,
            lease: DEFAULT_LEASE,
            send_timeout: DEFAULT_SEND_TIMEOUT,
            retry_delay: DEFAULT_RETRY_DELAY,
            max_retry_delay: DEFAULT_MAX_RETRY_DELAY,
            retention: DEFAULT_RETENTION,
            sweep_interval: DEFAULT_SWEEP_INTERVAL,
            sweep_batch: DEFAULT_SWEEP_BATCH,
            backlog_interval: DEFAULT_BACKLOG_INTERVAL,
        }
    }
}

/// An option out of its range: which, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("relay option {option} {problem}")]
pub struct InvalidRelayOption {
    /// The option's name (the field's).
    pub option: &'static str,
    /// What is wrong.
    pub problem: String,
}

fn within(
    option: &'static str,
    value: Duration,
    min: Duration,
    max: Duration,
) -> Result<(), InvalidRelayOption> {
    if value < min || value > max {
        return Err(InvalidRelayOption {
            option,
            problem: format!("must be from {min:?} to {max:?} (is {value:?})"),
        });
    }
    Ok(())
}

/// A setter per option, each checked by [`RelayOptions::validate`] (and so by `Relay::start`).
macro_rules! setters {
    ($($(#[$doc:meta])* $name:ident: $t:ty),* $(,)?) => {
        impl RelayOptions {
            $(
                $(#[$doc])*
                pub fn $name(mut self, value: $t) -> Self {
                    self.$name = value;
                    self
                }
            )*
        }
    };
}

setters! {
    /// Rows leased at most in one round (1 to 10,000).
    max_batch: usize,
    /// The longest wait without a wake-up (10 ms to 1 h).
    poll_interval: Duration,
    /// The wait after a wake-up before the lease, so that the commits of that while go in one
    /// round (0 to 1 s).
    gather: Duration,
    /// A lease's length (at least twice `send_timeout`).
    lease: Duration,
    /// How long a round's sends may take (from 1 s).
    send_timeout: Duration,
    /// The first wait after a failed send (from 10 ms).
    retry_delay: Duration,
    /// The longest wait after failed sends (at least `retry_delay`).
    max_retry_delay: Duration,
    /// How long sent rows are kept (1 minute to a year).
    retention: Duration,
    /// How often old sent rows are deleted (from 1 s).
    sweep_interval: Duration,
    /// Rows one delete statement takes at most (1 to 100,000).
    sweep_batch: usize,
    /// How often the backlog is read for the stats (from 100 ms).
    backlog_interval: Duration,
}

impl RelayOptions {
    /// Checks every option against its range.
    pub fn validate(&self) -> Result<(), InvalidRelayOption> {
        let count = |option, value: usize, max: usize| {
            if value == 0 || value > max {
                return Err(InvalidRelayOption {
                    option,
                    problem: format!("must be from 1 to {max} (is {value})"),
                });
            }
            Ok(())
        };
        count("max_batch", self.max_batch, 10_000)?;
        count("sweep_batch", self.sweep_batch, 100_000)?;
        let ms = Duration::from_millis;
        let s = Duration::from_secs;
        within("poll_interval", self.poll_interval, ms(10), s(3600))?;
        within("gather", self.gather, Duration::ZERO, s(1))?;
        within("send_timeout", self.send_timeout, s(1), s(3600))?;
        within("lease", self.lease, self.send_timeout * 2, LONGEST)?;
        within("retry_delay", self.retry_delay, ms(10), s(3600))?;
        within(
            "max_retry_delay",
            self.max_retry_delay,
            self.retry_delay,
            LONGEST,
        )?;
        within("retention", self.retention, s(60), LONGEST)?;
        within("sweep_interval", self.sweep_interval, s(1), LONGEST)?;
        within("backlog_interval", self.backlog_interval, ms(100), s(3600))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_are_valid_and_each_range_is_checked() {
        assert_eq!(RelayOptions::default().validate(), Ok(()));
        let short_lease = RelayOptions {
            lease: Duration::from_secs(30),
            ..RelayOptions::default()
        };
        let e = short_lease.validate().unwrap_err();
        assert_eq!(e.option, "lease");
        assert_eq!(
            e.to_string(),
            "relay option lease must be from 40s to 31536000s (is 30s)"
        );
        let no_batch = RelayOptions {
            max_batch: 0,
            ..RelayOptions::default()
        };
        assert_eq!(no_batch.validate().unwrap_err().option, "max_batch");
        let retention = RelayOptions {
            retention: Duration::from_secs(1),
            ..RelayOptions::default()
        };
        assert_eq!(retention.validate().unwrap_err().option, "retention");
    }
}
