//! The ack sink: applies the acks and nacks the lease actors decide, and awaits confirmations.
//!
//! Each action is handed to the client as it arrives: the client batches the RPCs itself (it
//! flushes acks on a 100 ms tick), so holding actions back for a turn of the event loop, as an
//! earlier version did, bought nothing but a timer per turn. On exactly-once subscriptions every
//! confirmation is awaited concurrently: awaiting them one after another would cap a stream at
//! about ten messages a second.

use crate::error::{AckFailure, Chain};
use crate::guard::Lifeline;
use crate::outcome::Action;
use crate::progress::{ProgressStore, clear_guarded};
use crate::source::{Confirmation, SettleHandle};
use crate::stats::{FailureKind, Stats};
use crate::tasks::Tasks;
use actix::prelude::*;
use futures::future::LocalBoxFuture;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll, ready};
use tokio::sync::oneshot;
use tokio_util::task::TaskTracker;
use tokio_util::task::task_tracker::TaskTrackerToken;

/// Command: send this action for this message.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub(crate) struct Apply {
    /// The message's handle.
    pub handle: Box<dyn SettleHandle>,
    /// Ack or nack.
    pub action: Action,
    /// For logs.
    pub message_id: Arc<str>,
    /// The message's span, so that a failed ack is logged in it.
    pub span: tracing::Span,
}

/// Command: resolves once every action received so far has been sent and, on exactly-once
/// subscriptions, confirmed or refused.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub(crate) struct Flush;

/// Command: stop (after a [`Flush`]); the sink lets go of the progress store.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub(crate) struct Shutdown;

/// Applies acks and nacks; counts confirmations and failed acks.
pub(crate) struct AckSink {
    subscription: Arc<str>,
    stats: Arc<Stats>,
    /// Records of finished messages, cleared once their ack is confirmed.
    progress: Option<Arc<dyn ProgressStore>>,
    /// Confirmations awaited now, polled as one stream (not one actor future each).
    confirming: Tasks<Confirming>,
    /// How many.
    pending: usize,
    /// `Flush` callers waiting for the confirmations to drain.
    waiters: Vec<oneshot::Sender<()>>,
    /// Tells the supervisor if the sink dies.
    lifeline: Lifeline,
    _alive: TaskTrackerToken,
}

impl AckSink {
    /// A sink for one subscription; `on_death` runs if it dies without being stopped.
    pub(crate) fn new(
        subscription: Arc<str>,
        stats: Arc<Stats>,
        progress: Option<Arc<dyn ProgressStore>>,
        lifeline: Lifeline,
        alive: &TaskTracker,
    ) -> Self {
        Self {
            subscription,
            stats,
            progress,
            confirming: Tasks::new(),
            pending: 0,
            waiters: Vec::new(),
            lifeline,
            _alive: alive.token(),
        }
    }

    fn apply(&mut self, apply: Apply) {
        let Apply {
            handle,
            action,
            message_id,
            span,
        } = apply;
        if let Confirmation::Pending(confirmation) = handle.settle(action) {
            self.pending += 1;
            let confirming = Confirming {
                confirmation,
                action,
                message_id,
                span,
                sent: tokio::time::Instant::now(),
            };
            if let Some(done) = self.confirming.start(confirming) {
                self.on_confirmed(done);
            }
        }
    }

    fn confirmed(
        &self,
        result: Result<(), AckFailure>,
        action: Action,
        message_id: &str,
        span: &tracing::Span,
    ) {
        match result {
            Ok(()) => {
                Stats::bump(&self.stats.confirmed);
                if let (Some(store), Action::Ack) = (&self.progress, action) {
                    // Pub/Sub will not redeliver it: the record has served its purpose.
                    clear_guarded(&**store, &self.subscription, message_id, &self.stats, span);
                }
            }
            Err(reason) => {
                Stats::bump(&self.stats.failed_acks);
                self.stats.failed(message_id, None, FailureKind::FailedAck);
                tracing::warn!(
                    parent: span,
                    subscription = %self.subscription,
                    %message_id,
                    ?action,
                    reason = %Chain(&reason),
                    "failed ack"
                );
            }
        }
    }

    fn on_confirmed(&mut self, done: Confirmed) {
        self.pending -= 1;
        self.stats.confirmation_seconds.observe(done.took);
        self.confirmed(done.result, done.action, &done.message_id, &done.span);
    }

    fn wake_waiters(&mut self) {
        if self.pending == 0 {
            for waiter in self.waiters.drain(..) {
                let _ = waiter.send(());
            }
        }
    }
}

impl Actor for AckSink {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.add_stream(self.confirming.completions());
    }
}

impl Handler<Shutdown> for AckSink {
    type Result = ();

    fn handle(&mut self, _: Shutdown, ctx: &mut Self::Context) {
        self.lifeline.disarm();
        ctx.stop();
    }
}

/// Test hook: a panic in the sink's own code.
#[cfg(test)]
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub(crate) struct Crash;

#[cfg(test)]
impl Handler<Crash> for AckSink {
    type Result = ();

    fn handle(&mut self, _: Crash, _: &mut Self::Context) {
        panic!("a bug in the ack sink (test)");
    }
}

/// An exactly-once confirmation on its way, with the message it is for.
struct Confirming {
    confirmation: LocalBoxFuture<'static, Result<(), AckFailure>>,
    action: Action,
    message_id: Arc<str>,
    span: tracing::Span,
    sent: tokio::time::Instant,
}

/// A confirmation that came back.
struct Confirmed {
    result: Result<(), AckFailure>,
    action: Action,
    message_id: Arc<str>,
    span: tracing::Span,
    took: std::time::Duration,
}

impl Future for Confirming {
    type Output = Confirmed;

    fn poll(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Confirmed> {
        let this = self.get_mut();
        let result = ready!(this.confirmation.as_mut().poll(cx));
        Poll::Ready(Confirmed {
            result,
            action: this.action,
            message_id: this.message_id.clone(),
            span: this.span.clone(),
            took: this.sent.elapsed(),
        })
    }
}

impl StreamHandler<Confirmed> for AckSink {
    fn handle(&mut self, done: Confirmed, _: &mut Self::Context) {
        self.on_confirmed(done);
        self.wake_waiters();
    }

    /// The confirmations stream never ends while the sink lives. (The default would stop it.)
    fn finished(&mut self, _: &mut Self::Context) {}
}

impl Handler<Apply> for AckSink {
    type Result = ();

    fn handle(&mut self, msg: Apply, _: &mut Self::Context) {
        self.apply(msg);
        self.wake_waiters();
    }
}

impl Handler<Flush> for AckSink {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, _: Flush, _: &mut Self::Context) -> Self::Result {
        let (tx, rx) = oneshot::channel();
        self.waiters.push(tx);
        self.wake_waiters();
        Box::pin(async move {
            let _ = rx.await;
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake::FakeHandle;
    use std::time::Duration;

    fn sink(stats: &Arc<Stats>) -> Addr<AckSink> {
        AckSink::new(
            "s".into(),
            stats.clone(),
            None,
            Lifeline::new(|| {}),
            &TaskTracker::new(),
        )
        .start()
    }

    fn apply(handle: FakeHandle, action: Action) -> Apply {
        Apply {
            handle: Box::new(handle),
            action,
            message_id: "m".into(),
            span: tracing::Span::none(),
        }
    }

    #[actix_rt::test]
    async fn best_effort_actions_are_sent_and_not_confirmed() {
        let stats = Arc::new(Stats::default());
        let sink = sink(&stats);
        let (h, settled) = FakeHandle::new(false);
        sink.do_send(apply(h, Action::Ack));
        sink.send(Flush).await.unwrap();
        assert_eq!(settled.action(), Some(Action::Ack));
        assert_eq!(stats.snapshot().confirmed, 0);
    }

    #[actix_rt::test]
    async fn refused_confirmations_are_counted_as_failed_acks() {
        let stats = Arc::new(Stats::default());
        let sink = sink(&stats);
        let (ok, _) = FakeHandle::confirming(Some(Ok(())));
        let (refused, _) = FakeHandle::confirming(Some(Err(AckFailure::LeaseExpired)));
        sink.do_send(apply(ok, Action::Ack));
        sink.do_send(apply(refused, Action::Ack));
        sink.send(Flush).await.unwrap();
        let s = stats.snapshot();
        assert_eq!((s.confirmed, s.failed_acks), (1, 1));
    }

    #[actix_rt::test]
    async fn confirmations_are_awaited_concurrently() {
        tokio::time::pause();
        let stats = Arc::new(Stats::default());
        let sink = sink(&stats);
        // Each confirmation takes 100 ms, like the client's flush tick.
        struct Slow;
        impl std::fmt::Debug for Slow {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("Slow")
            }
        }
        impl SettleHandle for Slow {
            fn settle(self: Box<Self>, _: Action) -> Confirmation {
                Confirmation::Pending(Box::pin(async {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    Ok(())
                }))
            }
        }
        let start = tokio::time::Instant::now();
        for _ in 0..50 {
            sink.do_send(Apply {
                handle: Box::new(Slow),
                action: Action::Ack,
                message_id: "m".into(),
                span: tracing::Span::none(),
            });
        }
        sink.send(Flush).await.unwrap();
        assert_eq!(stats.snapshot().confirmed, 50);
        // Sequential awaiting would take 5 s of (paused) time.
        assert!(
            start.elapsed() < Duration::from_millis(200),
            "{:?}",
            start.elapsed()
        );
    }
}
