//! What a subscription needs to know before anything is pulled: the registration checked, the
//! subscription read (retried within the start timeout), the dead-letter limit `drop()` follows,
//! and the settings its streams open with. Warnings worth giving once are given here.

use crate::api::registration::Registration;
use crate::error::{ReadError, StartError};
use crate::rules::options::EXACTLY_ONCE_MIN_LEASE_EXTENSION;
use crate::rules::supervision::{
    Backoff, resolve_limit, retry_at_start, short_for_exactly_once, validate_subscription_name,
};
use crate::source::{Connector, StreamSettings, SubscriptionInfo};
use std::time::Duration;
use tokio::time::Instant;

/// What start learned.
#[derive(Debug)]
pub(crate) struct Prepared {
    /// The subscription as read; `None` when reading it was not permitted.
    pub(crate) info: Option<SubscriptionInfo>,
    /// The dead-letter limit `drop()` follows.
    pub(crate) limit: Option<u32>,
    /// What each stream opens with.
    pub(crate) settings: StreamSettings,
}

/// Checks the registration, reads the subscription and settles what the streams open with.
pub(crate) async fn prepare(
    registration: &Registration,
    connector: &dyn Connector,
) -> Result<Prepared, StartError> {
    let name = registration.subscription.as_str();
    validate_subscription_name(name)?;
    registration.validate().map_err(StartError::InvalidOption)?;
    let options = &registration.options;
    let info = read_subscription(connector, name, options.start_timeout).await?;

    let from_subscription = info.as_ref().and_then(|i| i.max_delivery_attempts);
    let (limit, differ) = resolve_limit(options.max_attempts, from_subscription);
    if differ {
        tracing::warn!(subscription = %name, registration = ?options.max_attempts,
            dead_letter_policy = ?from_subscription,
            "max_attempts differs from the subscription's dead-letter policy; \
             drop() follows max_attempts (Pub/Sub still dead-letters by its policy)");
    }
    let exactly_once = info.as_ref().is_some_and(|i| i.exactly_once);
    if exactly_once && connector.is_global_endpoint() {
        tracing::warn!(subscription = %name,
            "exactly-once delivery holds only within one region, and this client uses the \
             global endpoint: connect to a locational endpoint such as \
             https://us-central1-pubsub.googleapis.com");
    }
    let extension = options.lease_extension();
    if short_for_exactly_once(options, exactly_once) {
        tracing::warn!(subscription = %name, max_lease_extension = ?extension,
            advised = ?EXACTLY_ONCE_MIN_LEASE_EXTENSION,
            "exactly-once subscription with a short lease extension: Pub/Sub advises long \
             extensions so that network delays do not expire ack ids (a refused ack is \
             redelivered work); kept as set");
    }
    // A push connector caps the lease at its push deadline: nothing extends a push.
    let max_lease = connector
        .lease_limit(info.as_ref())
        .map_or(options.max_lease, |limit| limit.min(options.max_lease));
    Ok(Prepared {
        info,
        limit,
        settings: StreamSettings {
            subscription: name.to_string(),
            max_outstanding_messages: options.max_outstanding_messages,
            max_outstanding_bytes: options.max_outstanding_bytes,
            subscription_max_outstanding_messages: options.max_outstanding_messages,
            subscription_max_outstanding_bytes: options.max_outstanding_bytes,
            max_lease,
            max_lease_extension: extension,
        },
    })
}

/// Reads the subscription within `timeout`, retrying what is worth it (each failed attempt
/// logged at warn). `None` when the read is not permitted.
async fn read_subscription(
    connector: &dyn Connector,
    name: &str,
    timeout: Duration,
) -> Result<Option<SubscriptionInfo>, StartError> {
    let deadline = Instant::now() + timeout;
    let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(2));
    let mut last = None;
    for attempt in 1u32.. {
        let read = tokio::time::timeout_at(deadline, connector.read_subscription(name)).await;
        let failure = match read {
            Err(_elapsed) => None,
            Ok(Ok(info)) => return Ok(Some(info)),
            Ok(Err(ReadError::PermissionDenied(cause))) => {
                tracing::warn!(subscription = %name, %cause,
                    "cannot read the subscription (needs pubsub.subscriptions.get): \
                     its dead-letter limit is unknown, so drop() acks unless max_attempts is set");
                return Ok(None);
            }
            Ok(Err(ReadError::NotFound(cause))) => {
                return Err(StartError::NotFound {
                    subscription: name.to_string(),
                    cause,
                });
            }
            Ok(Err(ReadError::Other { code, cause })) if !retry_at_start(code) => {
                return Err(StartError::Read {
                    subscription: name.to_string(),
                    code,
                    cause,
                });
            }
            Ok(Err(ReadError::Other { code, cause })) => Some((code, cause)),
        };
        let Some((code, cause)) = failure else {
            break;
        };
        let wait = backoff.next_delay(fastrand::f64());
        tracing::warn!(subscription = %name, attempt, ?code, %cause, retry_in = ?wait,
            "reading the subscription failed; retrying within the start timeout");
        last = Some(cause);
        if Instant::now() + wait >= deadline {
            break;
        }
        tokio::time::sleep(wait).await;
    }
    Err(StartError::Timeout {
        subscription: name.to_string(),
        after: timeout,
        last,
    })
}
