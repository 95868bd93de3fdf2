//! The ack sink: awaits the confirmations of exactly-once acks and nacks.
//!
//! Lease actors hand their action to the client themselves (the client batches the RPCs on its
//! own 100 ms tick); on at-least-once subscriptions that is the end of it, and the sink never
//! hears of the message. On exactly-once subscriptions the client answers with a confirmation,
//! which the lease actor sends here: the sink awaits every confirmation concurrently (awaiting
//! them one after another would cap a stream at about ten messages a second), counts and logs
//! the refused ones, and clears the progress record of each confirmed ack.

use crate::error::{AckFailure, Chain};
use crate::rt::lifeline::Lifeline;
use crate::rt::tasks::Tasks;
use crate::rules::outcome::Action;
use crate::status::stats::{FailureKind, Stats};
use crate::store::progress::{ProgressStore, clear_guarded};
use actix::prelude::*;
use futures::future::LocalBoxFuture;
use std::cell::RefCell;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll, ready};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};
use tokio::sync::oneshot;
use tokio_util::task::TaskTracker;
use tokio_util::task::task_tracker::TaskTrackerToken;

/// Command: await this exactly-once action's confirmation. Sent on the sink's inbox, a channel
/// on the sink's own thread (a confirmation is a future of that thread, not a `Send` message).
pub(crate) struct Confirm {
    /// What the client returned for the action.
    pub confirmation: LocalBoxFuture<'static, Result<(), AckFailure>>,
    /// Ack or nack.
    pub action: Action,
    /// For logs.
    pub message_id: Arc<str>,
    /// The message's span, so that a failed ack is logged in it.
    pub span: tracing::Span,
}

impl std::fmt::Debug for Confirm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Confirm")
            .field("action", &self.action)
            .field("message_id", &self.message_id)
            .finish_non_exhaustive()
    }
}

/// Command: resolves once every confirmation received so far was confirmed or refused.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub(crate) struct Flush;

/// Command: stop (after a [`Flush`]); the sink lets go of the progress store.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub(crate) struct Shutdown;

/// Where lease actors send what the sink must await.
pub(crate) type Confirmations = UnboundedSender<Confirm>;

/// Awaits confirmations; counts them and the failed acks.
pub(crate) struct AckSink {
    subscription: Arc<str>,
    /// What the lease actors sent; read as a stream, and emptied by a `Flush` first.
    inbox: Rc<RefCell<UnboundedReceiver<Confirm>>>,
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
    /// A sink for one subscription; if it dies without being stopped, its lifeline tells the supervisor.
    pub(crate) fn new(
        subscription: Arc<str>,
        inbox: UnboundedReceiver<Confirm>,
        stats: Arc<Stats>,
        progress: Option<Arc<dyn ProgressStore>>,
        lifeline: Lifeline,
        alive: &TaskTracker,
    ) -> Self {
        Self {
            subscription,
            inbox: Rc::new(RefCell::new(inbox)),
            stats,
            progress,
            confirming: Tasks::new(),
            pending: 0,
            waiters: Vec::new(),
            lifeline,
            _alive: alive.token(),
        }
    }

    fn await_confirmation(&mut self, confirm: Confirm) {
        let Confirm {
            confirmation,
            action,
            message_id,
            span,
        } = confirm;
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
        let inbox = self.inbox.clone();
        ctx.add_stream(futures::stream::poll_fn(move |cx| {
            inbox.borrow_mut().poll_recv(cx)
        }));
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

impl StreamHandler<Confirm> for AckSink {
    fn handle(&mut self, msg: Confirm, _: &mut Self::Context) {
        self.await_confirmation(msg);
        self.wake_waiters();
    }

    /// Every sender is gone: the subscription is stopping. (The default would stop the sink.)
    fn finished(&mut self, _: &mut Self::Context) {}
}

impl Handler<Flush> for AckSink {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, _: Flush, _: &mut Self::Context) -> Self::Result {
        // What was sent before the flush counts, read or not.
        loop {
            let next = self.inbox.borrow_mut().try_recv();
            let Ok(confirm) = next else { break };
            self.await_confirmation(confirm);
        }
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
    use std::time::Duration;

    fn sink(stats: &Arc<Stats>) -> (Addr<AckSink>, Confirmations) {
        let (confirmations, inbox) = tokio::sync::mpsc::unbounded_channel();
        let sink = AckSink::new(
            "s".into(),
            inbox,
            stats.clone(),
            None,
            Lifeline::new(|| {}),
            &TaskTracker::new(),
        )
        .start();
        (sink, confirmations)
    }

    fn confirm(result: Result<(), AckFailure>) -> Confirm {
        Confirm {
            confirmation: Box::pin(async move { result }),
            action: Action::Ack,
            message_id: "m".into(),
            span: tracing::Span::none(),
        }
    }

    #[actix_rt::test]
    async fn refused_confirmations_are_counted_as_failed_acks() {
        let stats = Arc::new(Stats::default());
        let (sink, confirmations) = sink(&stats);
        confirmations.send(confirm(Ok(()))).unwrap();
        confirmations
            .send(confirm(Err(AckFailure::LeaseExpired)))
            .unwrap();
        sink.send(Flush).await.unwrap();
        let s = stats.snapshot();
        assert_eq!((s.confirmed, s.failed_acks), (1, 1));
    }

    #[actix_rt::test]
    async fn confirmations_are_awaited_concurrently() {
        tokio::time::pause();
        let stats = Arc::new(Stats::default());
        let (sink, confirmations) = sink(&stats);
        let start = tokio::time::Instant::now();
        for _ in 0..50 {
            // Each confirmation takes 100 ms, like the client's flush tick.
            let _ = confirmations.send(Confirm {
                confirmation: Box::pin(async {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    Ok(())
                }),
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
