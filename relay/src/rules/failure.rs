//! What a failed send means: its kind (from Pub/Sub's status code), the reason word counted and
//! kept in the row, and how long the row waits before it is tried again. No failure deletes a
//! row: a missing topic or a refused permission is logged, counted and kept, and sent once a
//! person fixed it.

use crate::rules::options::RelayOptions;
use leasehold::error::Code;
use std::time::Duration;

/// Why a row was not sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum FailureKind {
    /// Pub/Sub could not be reached or answered with a transient error (unavailable, deadline
    /// exceeded, internal, resource exhausted, ...), or the round's `send_timeout` ran out:
    /// retried after a wait that doubles with each failure of the row.
    Unavailable,
    /// The topic does not exist (`NOT_FOUND`): kept, logged at error, retried at least a minute
    /// apart until the topic is created.
    TopicMissing,
    /// Pub/Sub refused the relay's credentials (`PERMISSION_DENIED`, `UNAUTHENTICATED`): kept,
    /// logged at error, retried at least a minute apart until the account may publish.
    PermissionDenied,
    /// Pub/Sub refused the message itself (`INVALID_ARGUMENT` and the like): kept, logged at
    /// error, retried at the longest wait (the outbox checks what it can before it writes a
    /// row, so this should not happen).
    Invalid,
    /// An earlier row of its ordering key failed in the same round, so Google's publisher held
    /// it back: retried with that row, so the key stays in order.
    OrderingKeyPaused,
}

/// Every kind, in the order the stats and metrics list them.
pub const FAILURE_KINDS: [FailureKind; 5] = [
    FailureKind::Unavailable,
    FailureKind::TopicMissing,
    FailureKind::PermissionDenied,
    FailureKind::Invalid,
    FailureKind::OrderingKeyPaused,
];

/// The least wait after a failure a person must fix.
const FIX_WAIT: Duration = Duration::from_secs(60);

impl FailureKind {
    /// The kind of a failure Pub/Sub answered with `code`.
    pub fn of_code(code: Code) -> Self {
        match code {
            Code::NotFound => Self::TopicMissing,
            Code::PermissionDenied | Code::Unauthenticated => Self::PermissionDenied,
            Code::InvalidArgument | Code::FailedPrecondition | Code::OutOfRange => Self::Invalid,
            _ => Self::Unavailable,
        }
    }

    /// The word counted (`leasehold_outbox_send_failures_total{reason}`) and kept in the row.
    pub fn reason(self) -> &'static str {
        match self {
            Self::Unavailable => "unavailable",
            Self::TopicMissing => "topic_missing",
            Self::PermissionDenied => "permission_denied",
            Self::Invalid => "invalid",
            Self::OrderingKeyPaused => "ordering_key_paused",
        }
    }

    /// Whether a person must act (it is logged at error).
    pub fn needs_a_fix(self) -> bool {
        matches!(
            self,
            Self::TopicMissing | Self::PermissionDenied | Self::Invalid
        )
    }

    /// How long a row waits before it is tried again after its `failures`-th failure in all
    /// (from 1): `retry_delay` doubling, at most `max_retry_delay`; at least a minute (or
    /// `max_retry_delay`, when shorter) when a person must fix it, and the longest wait for a
    /// message Pub/Sub refused.
    pub fn retry_after(self, failures: u32, options: &RelayOptions) -> Duration {
        let doubled = options
            .retry_delay
            .saturating_mul(1 << failures.saturating_sub(1).min(20));
        let wait = doubled.min(options.max_retry_delay);
        match self {
            Self::Invalid => options.max_retry_delay,
            Self::TopicMissing | Self::PermissionDenied => {
                wait.max(FIX_WAIT.min(options.max_retry_delay))
            }
            Self::Unavailable | Self::OrderingKeyPaused => wait,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_become_kinds_and_nothing_is_ever_dropped() {
        assert_eq!(
            FailureKind::of_code(Code::NotFound),
            FailureKind::TopicMissing
        );
        assert_eq!(
            FailureKind::of_code(Code::Unauthenticated),
            FailureKind::PermissionDenied
        );
        assert_eq!(
            FailureKind::of_code(Code::Unavailable),
            FailureKind::Unavailable
        );
        assert_eq!(
            FailureKind::of_code(Code::DeadlineExceeded),
            FailureKind::Unavailable
        );
        assert_eq!(
            FailureKind::of_code(Code::InvalidArgument),
            FailureKind::Invalid
        );
        let reasons: std::collections::HashSet<_> =
            FAILURE_KINDS.iter().map(|k| k.reason()).collect();
        assert_eq!(reasons.len(), FAILURE_KINDS.len());
    }

    #[test]
    fn waits_double_up_to_the_longest_and_a_fix_waits_a_minute() {
        let options = RelayOptions::default();
        let secs = |kind: FailureKind, n| kind.retry_after(n, &options).as_secs();
        assert_eq!(
            (1..=10)
                .map(|n| secs(FailureKind::Unavailable, n))
                .collect::<Vec<_>>(),
            [1, 2, 4, 8, 16, 32, 64, 128, 256, 300]
        );
        assert_eq!(secs(FailureKind::Unavailable, 1000), 300);
        assert_eq!(secs(FailureKind::TopicMissing, 1), 60);
        assert_eq!(secs(FailureKind::PermissionDenied, 8), 128);
        assert_eq!(secs(FailureKind::Invalid, 1), 300);
        assert!(FailureKind::TopicMissing.needs_a_fix());
        assert!(!FailureKind::Unavailable.needs_a_fix());
    }
}
