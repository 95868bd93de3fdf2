//! The runtime's traits implemented over Google's official client (`google-cloud-pubsub`).
//!
//! The only file that calls the client for consuming: streams come from `Subscriber::subscribe`,
//! settling goes through its `Handler` (confirmed acks on exactly-once subscriptions), and the
//! subscription is read with `SubscriptionAdmin::get_subscription`.

use crate::Connection;
use futures::FutureExt;
use futures::future::LocalBoxFuture;
use google_cloud_gax::options::RequestOptionsBuilder;
use google_cloud_gax::retry_policy::NeverRetry;
use google_cloud_pubsub::client::{Subscriber, SubscriptionAdmin};
use google_cloud_pubsub::error::AckError;
use google_cloud_pubsub::subscriber::handler::Handler;
use google_cloud_pubsub::subscriber::{MessageStream, ShutdownBehavior};
use leasehold_actors::error::{AckFailure, Cause, Code, ReadError, SourceError};
use leasehold_actors::source::{
    Action, Confirmation, Connector, MessageSource, Received, SettleHandle, StreamSettings,
    SubscriptionInfo, dead_letter_limit,
};
use std::time::{Duration, SystemTime};

/// How long one read of the subscription at start may take; `start` retries within its own
/// start timeout.
const READ_ATTEMPT_TIMEOUT: Duration = Duration::from_secs(5);

/// The gRPC code of a client error, when it has one.
fn code(e: &google_cloud_pubsub::Error) -> Option<Code> {
    e.status().map(|s| Code::from_i32(s.code as i32))
}

/// Reads subscriptions and opens streams through the official client.
#[derive(Debug)]
pub struct GoogleConnector {
    subscriber: Subscriber,
    admin: SubscriptionAdmin,
    global: bool,
}

impl GoogleConnector {
    /// Builds the clients for `connection`.
    pub async fn new(connection: &Connection) -> Result<Self, crate::error::ConnectError> {
        Ok(Self {
            subscriber: connection.subscriber().await?,
            admin: connection.subscription_admin().await?,
            global: connection.is_global(),
        })
    }
}

impl Connector for GoogleConnector {
    fn read_subscription<'a>(
        &'a self,
        subscription: &'a str,
    ) -> LocalBoxFuture<'a, Result<SubscriptionInfo, ReadError>> {
        async move {
            let s = self
                .admin
                .get_subscription()
                .set_subscription(subscription)
                // One attempt: `start` retries within its start timeout, logging each attempt.
                .with_retry_policy(NeverRetry)
                .with_attempt_timeout(READ_ATTEMPT_TIMEOUT)
                .send()
                .await
                .map_err(|e| {
                    let code = code(&e);
                    let cause = Cause::new(e);
                    match code {
                        Some(Code::PermissionDenied) => ReadError::PermissionDenied(cause),
                        Some(Code::NotFound) => ReadError::NotFound(cause),
                        code => ReadError::Other { code, cause },
                    }
                })?;
            Ok(SubscriptionInfo {
                exactly_once: s.enable_exactly_once_delivery,
                max_delivery_attempts: s
                    .dead_letter_policy
                    .as_ref()
                    .and_then(|p| dead_letter_limit(&p.dead_letter_topic, p.max_delivery_attempts)),
                ack_deadline: Duration::from_secs(s.ack_deadline_seconds.max(0) as u64),
                // `_deleted-topic_` when the topic was deleted.
                topic: Some(s.topic),
                dead_letter_topic: s
                    .dead_letter_policy
                    .as_ref()
                    .map(|p| p.dead_letter_topic.clone())
                    .filter(|t| !t.is_empty()),
            })
        }
        .boxed_local()
    }

    fn open(&self, settings: &StreamSettings) -> Box<dyn MessageSource> {
        let stream = self
            .subscriber
            .subscribe(&settings.subscription)
            .set_max_lease(settings.max_lease)
            .set_max_lease_extension(settings.max_lease_extension)
            // Within the limits `Options::validate` allows (at most 2^32 - 1).
            .set_max_outstanding_messages(settings.max_outstanding_messages as i64)
            .set_max_outstanding_bytes(settings.max_outstanding_bytes as i64)
            // The drain relies on it: acks and nacks sent after the stream is dropped still go
            // out, and the shutdown token resolves once they have.
            .set_shutdown_behavior(ShutdownBehavior::WaitForProcessing)
            .build();
        Box::new(GoogleSource(stream))
    }

    fn is_global_endpoint(&self) -> bool {
        self.global
    }
}

struct GoogleSource(MessageStream);

impl MessageSource for GoogleSource {
    fn next(&mut self) -> LocalBoxFuture<'_, Option<Result<Received, SourceError>>> {
        async move {
            let item = self.0.next().await?;
            Some(match item {
                Err(e) => Err(SourceError::Stream {
                    code: code(&e),
                    cause: Cause::new(e),
                }),
                Ok((m, handler)) => Ok(Received {
                    message_id: m.message_id,
                    data: m.data,
                    attributes: m.attributes,
                    ordering_key: m.ordering_key,
                    publish_time: m.publish_time.and_then(|t| SystemTime::try_from(t).ok()),
                    delivery_attempt: handler
                        .delivery_attempt()
                        .and_then(|a| u32::try_from(a).ok()),
                    handle: Box::new(GoogleHandle(handler)),
                }),
            })
        }
        .boxed_local()
    }

    fn shutdown(&self) -> LocalBoxFuture<'static, ()> {
        let token = self.0.shutdown_token();
        async move { token.shutdown().await }.boxed_local()
    }
}

/// The client's handler for one message. Dropping it unsettled nacks the message.
#[derive(Debug)]
struct GoogleHandle(Handler);

impl SettleHandle for GoogleHandle {
    fn settle(self: Box<Self>, action: Action) -> Confirmation {
        match (self.0, action) {
            (Handler::ExactlyOnce(h), Action::Ack) => Confirmation::Pending(
                async move { h.confirmed_ack().await.map_err(ack_failure) }.boxed_local(),
            ),
            (Handler::ExactlyOnce(h), Action::Nack) => Confirmation::Pending(
                async move { h.confirmed_nack().await.map_err(ack_failure) }.boxed_local(),
            ),
            (h, Action::Ack) => {
                h.ack();
                Confirmation::BestEffort
            }
            (h, Action::Nack) => {
                h.nack();
                Confirmation::BestEffort
            }
        }
    }
}

fn ack_failure(e: AckError) -> AckFailure {
    match e {
        AckError::LeaseExpired => AckFailure::LeaseExpired,
        AckError::ShutdownBeforeAck | AckError::Shutdown(_) => AckFailure::Shutdown(Cause::new(e)),
        other => {
            let code = match &other {
                AckError::Rpc { source, .. } => code(source),
                _ => None,
            };
            AckFailure::Refused {
                code,
                cause: Cause::new(other),
            }
        }
    }
}
