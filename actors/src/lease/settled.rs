//! What settling one message records, and where its action goes: the counter of its fate, the
//! lease-held and publish-to-settle histograms, the failure record of a message Pub/Sub will
//! dead-letter, the span's result, and the action handed to the client (on exactly-once
//! subscriptions with its confirmation, for the ack sink to await).
//!
//! Plain functions over what the lease actor holds, so `actor.rs` keeps to turning events into
//! state calls.

use crate::lease::ack_sink::{Confirm, Confirmations};
use crate::rt::tasks::poll_once;
use crate::rules::lease_state::LeaseState;
use crate::rules::outcome::{Action, Fate};
use crate::source::{Confirmation, SettleHandle};
use crate::status::stats::{FailureKind, Stats};
use std::sync::Arc;
use std::task::Poll;
use std::time::SystemTime;
use tokio::time::Instant;

/// Counts a message settled with `fate` (by `action`), records it among the failures if Pub/Sub
/// dead-letters it, and puts the result on its span.
pub(crate) fn count(
    stats: &Stats,
    fate: Fate,
    action: Action,
    state: &LeaseState,
    publish_time: Option<SystemTime>,
    message_id: &str,
    span: &tracing::Span,
) {
    span.record("messaging.gcp_pubsub.result", fate.as_str());
    tracing::debug!(?fate, ?action, "settled");
    let counter = match fate {
        Fate::Acked => &stats.acked,
        Fate::Retried => &stats.retried,
        Fate::Dropped => &stats.dropped,
        Fate::DeadLettered => &stats.dead_lettered,
        Fate::Released => &stats.released,
    };
    Stats::bump(counter);
    stats
        .lease_held_seconds
        .observe(state.clock().held(Instant::now()));
    if let Some(published) = publish_time
        && let Ok(since) = SystemTime::now().duration_since(published)
    {
        stats.publish_to_settle_seconds.observe(since);
    }
    if fate == Fate::DeadLettered {
        stats.failed(message_id, state.attempt(), FailureKind::DeadLettered);
    } else if matches!(fate, Fate::Retried | Fate::Released) && state.is_last_attempt() {
        // Pub/Sub dead-letters this nack: say so beside what made it.
        stats.failed(
            message_id,
            state.attempt(),
            FailureKind::RetriedOnLastAttempt,
        );
    }
}

/// The lease budget ran out before the handler settled the message: counted, recorded, logged.
pub(crate) fn lost_lease(
    stats: &Stats,
    subscription: &str,
    message_id: &str,
    attempt: Option<u32>,
) {
    Stats::bump(&stats.lost_leases);
    stats.failed(message_id, attempt, FailureKind::LostLease);
    tracing::warn!(%subscription, %message_id,
        "lost lease: max_lease ran out before the handler settled the message; Pub/Sub will \
         redeliver it");
}

/// Hands `action` to the client now (it batches the RPCs); on exactly-once subscriptions the
/// sink awaits the confirmation.
pub(crate) fn hand_to_client(
    handle: Box<dyn SettleHandle>,
    action: Action,
    sink: &Confirmations,
    message_id: &Arc<str>,
    span: &tracing::Span,
) {
    let Confirmation::Pending(mut confirmation) = handle.settle(action) else {
        return;
    };
    // Polled once here: Google's client queues the action when its confirmation is first
    // polled, so the action leaves now, whatever becomes of the sink.
    if let Poll::Ready(result) = poll_once(confirmation.as_mut()) {
        confirmation = Box::pin(std::future::ready(result));
    }
    // Refused only when the sink is gone (the subscription failed): the action was queued with
    // the client all the same; its confirmation goes unawaited.
    let _ = sink.send(Confirm {
        confirmation,
        action,
        message_id: message_id.clone(),
        span: span.clone(),
    });
}
